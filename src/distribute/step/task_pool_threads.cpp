// TaskPool's threads: starting and stopping them, a helper's life between phases, where a
// sleeping helper wakes, and whether the machine is busy.
#include "distribute/step/task_pool.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>

#include "core/cpu_affinity.h"
#include "core/cpu_load.h"
#include "core/futex.h"
#include "lockstep/core/cpu_cores.h"
#include "lockstep/core/cpu_isa.h"
#include "lockstep/core/denormals.h"
#include "lockstep/core/error.h"
#include "lockstep/core/task_cancellation.h"

#include "task_pool_record.h"

namespace lockstep::distribute {

namespace {
thread_local bool t_helper_thread = false;
}  // namespace

bool TaskPool::on_helper_thread() {
  return t_helper_thread;
}

using namespace task_pool_detail;

TaskPool::TaskPool(TaskPoolOptions options)
    : options_(std::move(options)),
      idle_work_prefers_own_task_(
          options_.idle_work_prefers_own_task.value_or(cpu_vendor() == CpuVendor::amd)),
      idle_work_before_chained_phase_(
          options_.idle_work_before_chained_phase.value_or(cpu_vendor() == CpuVendor::intel)) {
  if (options_.num_threads < 1) {
    throw InvalidArgument("TaskPool: expected num_threads >= 1. Received: " +
                          std::to_string(options_.num_threads) + ".");
  }
  if (!(options_.backup_factor >= 1.0)) {
    throw InvalidArgument("TaskPool: expected backup_factor >= 1. Received: " +
                          std::to_string(options_.backup_factor) + ".");
  }
  if (options_.stall_window.count() < 0) {
    throw InvalidArgument("TaskPool: expected stall_window >= 0. Received: " +
                          std::to_string(options_.stall_window.count()) + " us.");
  }
  for (auto& t : typical_ns_) t.store(0, std::memory_order_relaxed);
  if (options_.busy_extra_threads < 0) {
    throw InvalidArgument("TaskPool: expected busy_extra_threads >= 0. Received: " +
                          std::to_string(options_.busy_extra_threads) + ".");
  }
  const int total = total_threads();
  cpu_clocks_ = std::make_unique<std::atomic<int>[]>(static_cast<size_t>(total));
  for (int t = 0; t < total; ++t) cpu_clocks_[t].store(kNoClock);
  seats_ = std::make_unique<Seat[]>(static_cast<size_t>(total));
  phase_threads_.store(options_.num_threads);
  for (size_t i = 0; i < kRing; ++i) {
    ring_.push_back(std::make_unique<Record>());
    ring_.back()->cursors = std::make_unique<Record::Cursor[]>(static_cast<size_t>(total));
    ring_.back()->then_cursors = std::make_unique<Record::Cursor[]>(static_cast<size_t>(total));
  }
  awake_.store(total - 1);
  for (int t = 1; t < total; ++t) threads_.emplace_back(&TaskPool::helper, this, t);
}

TaskPool::~TaskPool() {
  stopping_.store(true, std::memory_order_release);
  announced_.fetch_add(1, std::memory_order_release);
  os::futex_wake_all(&announced_);
  standby_.fetch_add(1, std::memory_order_release);
  os::futex_wake_all(&standby_);
  for (auto& t : threads_) t.join();
}

bool TaskPool::spinning_allowed() {
  // Sampled by the caller every 20 ms: spinning pays only when every thread of ours has a core
  // of its own; with anything else runnable it steals the time a descheduled thread needs.
  auto now = Clock::now();
  if (now - spin_checked_ > std::chrono::milliseconds(20) || options_.machine_busy) {
    spin_checked_ = now;
    static const int cpus = available_core_count();
    int running = os::procs_running();
    int ours = 1 + awake_.load(std::memory_order_relaxed) - parked_.load(std::memory_order_relaxed);
    int others = running < 0 ? 0 : std::max(0, running - ours);
    load_.add(others);
    const bool was = phase_threads_.load(std::memory_order_relaxed) > options_.num_threads;
    const bool busy = options_.machine_busy ? options_.machine_busy() : load_.busy(was);
    placing_.store(busy, std::memory_order_relaxed);
    const int active = busy ? total_threads() : options_.num_threads;
    if (active != phase_threads_.load(std::memory_order_relaxed)) {
      phase_threads_.store(active, std::memory_order_seq_cst);
      standby_.fetch_add(1, std::memory_order_seq_cst);
      os::futex_wake_all(&standby_);
    }
    spin_ok_.store(load_.others_for_spinning() + active <= cpus, std::memory_order_relaxed);
  }
  return spin_ok_.load(std::memory_order_relaxed);
}

void TaskPool::helper(int thread) {
  t_helper_thread = true;
  os::adopt_thread_start_mask();
  if (thread < static_cast<int>(options_.pin_cores.size()))
    pin_current_thread(options_.pin_cores[static_cast<size_t>(thread)]);
  {
    Seat& seat = seats_[static_cast<size_t>(thread)];
    CPU_ZERO(&seat.mask);
    sched_getaffinity(0, sizeof seat.mask, &seat.mask);
    seat.tid.store(static_cast<int>(os::this_thread_id()), std::memory_order_release);
  }
  omp_set_num_threads(1);
  register_cpu_clock(thread);
  profiler::set_thread_label("pool thread", thread);
  uint64_t seen = 0;
  while (!stopping_.load(std::memory_order_acquire)) {
    if (thread >= phase_threads_.load(std::memory_order_seq_cst)) {
      // A busy-machine extra on a quiet machine: sleep until the pool wants it.
      const uint32_t w = standby_.load(std::memory_order_seq_cst);
      if (thread >= phase_threads_.load(std::memory_order_seq_cst) && !stopping_.load()) {
        // Parked, it stays counted in awake_: run() wakes the announced_ futex only when a
        // helper sleeps there.
        parked_.fetch_add(1, std::memory_order_seq_cst);
        os::futex_wait(&standby_, w);
        parked_.fetch_sub(1, std::memory_order_seq_cst);
      }
      continue;
    }
    const uint64_t cur = current_.load(std::memory_order_seq_cst);
    if (cur != 0 && cur != seen) {
      seen = cur;
      Record& rec = *ring_[cur % kRing];
      rec.active.fetch_add(1, std::memory_order_seq_cst);
      if (rec.sequence.load(std::memory_order_seq_cst) != cur || thread >= rec.threads) {
        rec.leave();  // late (that phase is long over and its record reused), or not wanted
        continue;
      }
      if (has_join_hook_.load(std::memory_order_acquire)) {
        JoinHook hook;
        {
          std::lock_guard lock(hook_mu_);
          hook = join_hook_;
        }
        if (hook) hook(thread, cur);
      }
      Seat& seat = seats_[static_cast<size_t>(thread)];
      seat.phase.store(cur, std::memory_order_seq_cst);
      for (int64_t wake = 0; work_on(rec, thread, wake);) wait_for_progress(rec, thread, wake);
      seat.phase.store(0, std::memory_order_seq_cst);
      restore_mask(thread);
      rec.leave();
      continue;
    }
    if (spin_ok_.load(std::memory_order_relaxed) && os::spin_until(options_.spin, [&] {
          return current_.load(std::memory_order_relaxed) != seen ||
                 stopping_.load(std::memory_order_relaxed);
        }))
      continue;
    Seat& seat = seats_[static_cast<size_t>(thread)];
    seat.cpu.store(sched_getcpu(), std::memory_order_relaxed);
    seat.asleep.store(1, std::memory_order_seq_cst);
    awake_.fetch_sub(1, std::memory_order_seq_cst);
    if (current_.load(std::memory_order_seq_cst) == seen && !stopping_.load())
      os::futex_wait(&announced_, static_cast<uint32_t>(seen));
    seat.asleep.store(0, std::memory_order_seq_cst);
    // Moved off the caller's CPU for this wake-up only: its CPU is in its own mask, so putting the
    // mask back does not move it again.
    restore_mask(thread);
    awake_.fetch_add(1, std::memory_order_seq_cst);
  }
}

bool TaskPool::pinned(int thread) const {
  return thread < static_cast<int>(options_.pin_cores.size()) &&
         !options_.pin_cores[static_cast<size_t>(thread)].empty();
}

void TaskPool::place_sleepers_off(int cpu) {
  if (cpu < 0) return;
  for (int t = 1; t < total_threads(); ++t) {
    if (pinned(t)) continue;
    Seat& seat = seats_[static_cast<size_t>(t)];
    if (seat.asleep.load(std::memory_order_seq_cst) == 0 ||
        seat.cpu.load(std::memory_order_relaxed) != cpu)
      continue;
    cpu_set_t elsewhere;
    if (!os::mask_without(seat.mask, cpu, elsewhere)) continue;
    if (sched_setaffinity(seat.tid.load(std::memory_order_acquire), sizeof elsewhere, &elsewhere) ==
        0) {
      seat.moved.store(1, std::memory_order_release);
      placements_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

int TaskPool::pull_late_runners(uint64_t sequence, int cpu) {
  if (cpu < 0) return 0;
  cpu_set_t here;
  CPU_ZERO(&here);
  CPU_SET(cpu, &here);
  int pulled = 0;
  for (int t = 1; t < total_threads(); ++t) {
    if (pinned(t)) continue;
    Seat& seat = seats_[static_cast<size_t>(t)];
    const pid_t tid = seat.tid.load(std::memory_order_acquire);
    const uint64_t phase = seat.phase.load(std::memory_order_seq_cst);
    if (tid <= 0 || phase == 0 || phase >= sequence || !CPU_ISSET(cpu, &seat.mask)) continue;
    // Marked before the narrowing: a helper that leaves the phase after it finds the mark.
    seat.moved.store(1, std::memory_order_seq_cst);
    if (sched_setaffinity(tid, sizeof here, &here) != 0) continue;
    ++pulled;
    pulls_.fetch_add(1, std::memory_order_relaxed);
    // Left the phase meanwhile: it may have put its mask back before the narrowing, and will not
    // look again until it has slept. The same mask, whichever of the two writes it last.
    if (seat.phase.load(std::memory_order_seq_cst) != phase)
      sched_setaffinity(tid, sizeof seat.mask, &seat.mask);
  }
  return pulled;
}

void TaskPool::restore_mask(int thread) {
  Seat& seat = seats_[static_cast<size_t>(thread)];
  if (seat.moved.exchange(0, std::memory_order_acq_rel) != 0)
    sched_setaffinity(0, sizeof seat.mask, &seat.mask);
}

int TaskPool::asleep_helpers() const {
  int n = 0;
  for (int t = 1; t < total_threads(); ++t)
    n += seats_[static_cast<size_t>(t)].asleep.load(std::memory_order_acquire);
  return n;
}

void TaskPool::register_cpu_clock(int thread) {
  clockid_t clock{};
  const bool ok =
      options_.stall_window.count() > 0 && pthread_getcpuclockid(pthread_self(), &clock) == 0;
  cpu_clocks_[static_cast<size_t>(thread)].store(ok ? static_cast<int>(clock) : kNoClock,
                                                 std::memory_order_release);
}

bool TaskPool::holder_descheduled(TaskState& ts, int64_t now, int64_t& wake_ns) {
  const int64_t window =
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.stall_window).count();
  const int holder = ts.holder.load(std::memory_order_acquire);
  if (window <= 0 || holder < 0) return false;
  // A task younger than the window is left alone: most finish before anyone needs to look.
  const int64_t started = ts.started_ns.load(std::memory_order_acquire);
  if (now - started < window) {
    wake_ns = std::min(wake_ns, started + window);
    return false;
  }
  const int64_t cpu =
      cpu_ns(cpu_clocks_[static_cast<size_t>(holder)].load(std::memory_order_acquire));
  if (cpu < 0) return false;
  const int64_t wall0 = ts.sample_wall_ns.load(std::memory_order_acquire);
  const int64_t cpu0 = ts.sample_cpu_ns.load(std::memory_order_acquire);
  if (wall0 != 0 && now - wall0 < window) {
    wake_ns = std::min(wake_ns, wall0 + window);
    return false;
  }
  // Idle threads may sample at once; any of their samples will do.
  ts.sample_cpu_ns.store(cpu, std::memory_order_relaxed);
  ts.sample_wall_ns.store(now, std::memory_order_release);
  if (wall0 == 0) {
    wake_ns = std::min(wake_ns, now + window);
    return false;
  }
  return (cpu - cpu0) * 4 < now - wall0;
}

}  // namespace lockstep::distribute
