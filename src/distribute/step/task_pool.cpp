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
#include "lockstep/core/denormals.h"
#include "lockstep/core/error.h"
#include "lockstep/core/task_cancellation.h"

namespace lockstep::distribute {

namespace {

using Clock = std::chrono::steady_clock;
// Phases whose records are kept: run() reuses a record only once no thread works on its old
// phase, and a thread descheduled there (beside a busy process, for a scheduler slice of a few
// milliseconds) would hold the caller; 64 phases are a few steps' worth of milliseconds.
constexpr size_t kRing = 64;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

constexpr int kNoClock = -1;

// CPU time consumed so far by the thread whose clock is `clock`, or -1 if it cannot be read.
int64_t cpu_ns(int clock) {
  if (clock == kNoClock) return -1;
  timespec ts{};
  if (clock_gettime(static_cast<clockid_t>(clock), &ts) != 0) return -1;
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

}  // namespace

struct TaskPool::TaskState {
  std::atomic<uint32_t> done{0};  // also the runs' cancellation flag
  std::atomic<uint32_t> runners{0};
  std::atomic<int64_t> started_ns{0};
  std::atomic<int> holder{-1};      // thread index of the first run
  std::atomic<int> holder_cpu{-1};  // the CPU it claimed the task on
  // The last sample of the holder's CPU clock by an idle thread (wall 0: none yet).
  std::atomic<int64_t> sample_wall_ns{0}, sample_cpu_ns{0};
};

struct TaskPool::Record {
  std::atomic<uint64_t> sequence{0};  // 0 while being reset
  TaskPhase* phase = nullptr;
  // Two phases chained (run(first, then)): tasks [0, split) are `phase`'s, the others
  // `then`'s, which open once every task of the first phase has committed and its phase_done()
  // has returned.
  TaskPhase* then = nullptr;
  int split = 0;
  std::atomic<bool> open{true};
  int num_tasks = 0;
  int kinds[2] = {0, 0};
  int threads = 1;  // threads taking part (TaskPool::phase_threads_ when announced)
  std::unique_ptr<TaskState[]> tasks;
  int capacity = 0;
  // Tasks are dealt out in one contiguous range per thread, each with its own cursor, and a thread
  // that finishes its range takes from the others'. So when no thread is slow, task i runs on the
  // same thread every step and finds in that core's cache what its previous run left there (the
  // update's block of weights and slots); a thread that is slow just loses tasks to the others.
  struct alignas(64) Cursor {
    std::atomic<int> next{0};
    int end = 0;
  };
  std::unique_ptr<Cursor[]> cursors, then_cursors;  // the first phase's, the second's
  std::atomic<int> committed{0};
  std::atomic<uint32_t> progress{0};  // futex word: bumped at every commit and at failure
  std::atomic<int> waiters{0};
  std::atomic<int> active{0};        // threads working on this phase
  std::atomic<uint32_t> drained{0};  // futex word: bumped when `active` drops to 0
  // Runs of this phase's tasks under way (what wait_for_runs_before waits for). A thread that is
  // only looking for work is in `active` but not here: descheduled there, it holds nobody.
  std::atomic<int> executing{0};
  std::atomic<uint32_t> executed{0};  // futex word: bumped when `executing` drops to 0
  std::atomic<int> executing_waiters{0};
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  std::exception_ptr error;
  int error_task = INT_MAX;

  TaskPhase& phase_of(int task) const { return task < split ? *phase : *then; }
  int local(int task) const { return task < split ? task : task - split; }
  int kind_of(int task) const { return kinds[task < split ? 0 : 1]; }

  bool complete() const {
    return failed.load(std::memory_order_acquire) ||
           committed.load(std::memory_order_acquire) == num_tasks;
  }
  void leave() {
    if (active.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      drained.fetch_add(1, std::memory_order_release);
      os::futex_wake_all(&drained);
    }
  }
  void wait_drained() {
    for (;;) {
      uint32_t w = drained.load(std::memory_order_acquire);
      if (active.load(std::memory_order_acquire) == 0) return;
      os::futex_wait(&drained, w);
    }
  }
  void stop_executing() {
    if (executing.fetch_sub(1, std::memory_order_seq_cst) == 1) {
      executed.fetch_add(1, std::memory_order_seq_cst);
      if (executing_waiters.load(std::memory_order_seq_cst) > 0) os::futex_wake_all(&executed);
    }
  }
  void wait_executed() {
    executing_waiters.fetch_add(1, std::memory_order_seq_cst);
    for (;;) {
      const uint32_t w = executed.load(std::memory_order_seq_cst);
      if (executing.load(std::memory_order_seq_cst) == 0) break;
      os::futex_wait(&executed, w);
    }
    executing_waiters.fetch_sub(1, std::memory_order_seq_cst);
  }
  void bump_progress() {
    progress.fetch_add(1, std::memory_order_seq_cst);
    if (waiters.load(std::memory_order_seq_cst) > 0) os::futex_wake_all(&progress);
  }
};

TaskPool::TaskPool(TaskPoolOptions options) : options_(std::move(options)) {
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

void TaskPool::set_run_hook(RunHook hook) {
  std::lock_guard lock(hook_mu_);
  hook_ = std::move(hook);
  has_hook_.store(static_cast<bool>(hook_), std::memory_order_release);
}

void TaskPool::set_join_hook(JoinHook hook) {
  std::lock_guard lock(hook_mu_);
  join_hook_ = std::move(hook);
  has_join_hook_.store(static_cast<bool>(join_hook_), std::memory_order_release);
}

TaskPoolStats TaskPool::stats() const {
  return {sequence_,         runs_.load(),       backups_.load(),      backup_wins_.load(),
          cancelled_.load(), placements_.load(), eager_backups_.load()};
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
    bool busy;
    if (options_.machine_busy) {
      busy = options_.machine_busy();
    } else {
      // procs_running is one instant. A quiet machine shows short blips (a kernel thread), which
      // must not wake the extras: busy takes two busy samples in a row. A busy one can look quiet
      // for a sample (the other process between two runs, ours counted awake while falling
      // asleep): it stays busy until ten quiet samples in a row.
      busy_streak_ = others > 0 ? busy_streak_ + 1 : 0;
      quiet_streak_ = others > 0 ? 0 : quiet_streak_ + 1;
      const bool was = phase_threads_.load(std::memory_order_relaxed) > options_.num_threads;
      busy = was ? quiet_streak_ < 10 : busy_streak_ >= 2;
    }
    placing_.store(busy, std::memory_order_relaxed);
    const int active = busy ? total_threads() : options_.num_threads;
    if (active != phase_threads_.load(std::memory_order_relaxed)) {
      phase_threads_.store(active, std::memory_order_seq_cst);
      standby_.fetch_add(1, std::memory_order_seq_cst);
      os::futex_wake_all(&standby_);
    }
    spin_ok_.store(others + active <= cpus, std::memory_order_relaxed);
  }
  return spin_ok_.load(std::memory_order_relaxed);
}

uint64_t TaskPool::run(TaskPhase& phase) {
  return run_phases(phase, nullptr);
}

uint64_t TaskPool::run(TaskPhase& first, TaskPhase& then) {
  return run_phases(first, &then);
}

uint64_t TaskPool::run_phases(TaskPhase& phase, TaskPhase* then) {
  // Holds the caller's runs and waits; the rest of it is scheduling, or time the caller was
  // descheduled while the helpers it woke ran the phase (a busy machine).
  profiler::ScopedSpan tasks(profiler::Phase::tasks);
  const uint64_t seq = ++sequence_;
  Record& rec = *ring_[seq % kRing];
  // A record is reused only once nobody works on its old phase (losing runs may linger).
  rec.sequence.store(0, std::memory_order_seq_cst);
  rec.wait_drained();
  const int split = phase.num_tasks();
  const int n = split + (then != nullptr ? then->num_tasks() : 0);
  if (n > rec.capacity) {
    rec.tasks = std::make_unique<TaskState[]>(static_cast<size_t>(n));
    rec.capacity = n;
  }
  for (int i = 0; i < n; ++i) {
    rec.tasks[i].done.store(0, std::memory_order_relaxed);
    rec.tasks[i].runners.store(0, std::memory_order_relaxed);
    rec.tasks[i].started_ns.store(0, std::memory_order_relaxed);
    rec.tasks[i].holder.store(-1, std::memory_order_relaxed);
    rec.tasks[i].holder_cpu.store(-1, std::memory_order_relaxed);
    rec.tasks[i].sample_wall_ns.store(0, std::memory_order_relaxed);
  }
  register_cpu_clock(0);
  rec.phase = &phase;
  rec.then = then;
  rec.split = split;
  rec.num_tasks = n;
  rec.kinds[0] = std::clamp(phase.kind(), 0, kMaxKinds - 1);
  rec.kinds[1] = then != nullptr ? std::clamp(then->kind(), 0, kMaxKinds - 1) : rec.kinds[0];
  if (then != nullptr && split == 0) phase.phase_done();  // nothing to wait for
  rec.open.store(then == nullptr || split == 0, std::memory_order_relaxed);
  if (!threads_.empty()) spinning_allowed();
  rec.threads = phase_threads_.load(std::memory_order_relaxed);
  for (int t = 0, threads = rec.threads; t < threads; ++t) {
    rec.cursors[t].next.store(static_cast<int>(int64_t{split} * t / threads),
                              std::memory_order_relaxed);
    rec.cursors[t].end = static_cast<int>(int64_t{split} * (t + 1) / threads);
    rec.then_cursors[t].next.store(split + static_cast<int>(int64_t{n - split} * t / threads),
                                   std::memory_order_relaxed);
    rec.then_cursors[t].end = split + static_cast<int>(int64_t{n - split} * (t + 1) / threads);
  }
  rec.committed.store(0, std::memory_order_relaxed);
  rec.failed.store(false, std::memory_order_relaxed);
  rec.error = nullptr;
  rec.error_task = INT_MAX;
  // The caller; fetch_add, not store: a helper that saw the old phase may be backing off.
  rec.active.fetch_add(1, std::memory_order_seq_cst);
  rec.sequence.store(seq, std::memory_order_seq_cst);
  if (n == 0) {
    rec.leave();
    return seq;
  }
  if (!threads_.empty()) {
    current_.store(seq, std::memory_order_seq_cst);
    announced_.store(static_cast<uint32_t>(seq), std::memory_order_seq_cst);
    if (awake_.load(std::memory_order_seq_cst) < static_cast<int>(threads_.size())) {
      if (placing_.load(std::memory_order_relaxed)) place_sleepers_off(sched_getcpu());
      os::futex_wake_all(&announced_);
    }
  }
  if (profiler::recording()) profiler::set_thread_label("host / pool thread", 0);
  // The caller runs tasks too; its kernels must stay single-threaded like the pool's.
  const int saved_omp = omp_get_max_threads();
  if (saved_omp != 1) omp_set_num_threads(1);
  for (int64_t wake = 0; work_on(rec, 0, wake);) wait_for_progress(rec, 0, wake);
  if (saved_omp != 1) omp_set_num_threads(saved_omp);
  rec.leave();
  if (rec.failed.load(std::memory_order_acquire)) {
    // Every run of the failed phase is cancelled; let them stop before the caller unwinds the
    // state they use.
    rec.wait_drained();
    std::rethrow_exception(rec.error);
  }
  return seq;
}

void TaskPool::wait_for_runs_before(uint64_t sequence) {
  for (auto& r : ring_) {
    uint64_t s = r->sequence.load(std::memory_order_acquire);
    if (s != 0 && s < sequence && r->executing.load(std::memory_order_seq_cst) != 0) {
      profiler::ScopedSpan wait(profiler::Phase::wait);
      r->wait_executed();
    }
  }
}

void TaskPool::helper(int thread) {
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
      for (int64_t wake = 0; work_on(rec, thread, wake);) wait_for_progress(rec, thread, wake);
      rec.leave();
      continue;
    }
    if (spin_ok_.load(std::memory_order_relaxed)) {
      const auto until = Clock::now() + options_.spin;
      bool changed = false;
      for (int i = 0; !changed; ++i) {
        os::cpu_relax();
        changed = current_.load(std::memory_order_relaxed) != seen ||
                  stopping_.load(std::memory_order_relaxed);
        if ((i & 63) == 63 && Clock::now() > until) break;
      }
      if (changed) continue;
    }
    Seat& seat = seats_[static_cast<size_t>(thread)];
    seat.cpu.store(sched_getcpu(), std::memory_order_relaxed);
    seat.asleep.store(1, std::memory_order_seq_cst);
    awake_.fetch_sub(1, std::memory_order_seq_cst);
    if (current_.load(std::memory_order_seq_cst) == seen && !stopping_.load())
      os::futex_wait(&announced_, static_cast<uint32_t>(seen));
    seat.asleep.store(0, std::memory_order_seq_cst);
    // Moved off the caller's CPU for this wake-up only: its CPU is in its own mask, so putting the
    // mask back does not move it again.
    if (seat.moved.exchange(0, std::memory_order_acq_rel) != 0)
      sched_setaffinity(0, sizeof seat.mask, &seat.mask);
    awake_.fetch_add(1, std::memory_order_seq_cst);
  }
}

int64_t TaskPool::backup_threshold_ns(int kind) const {
  const int64_t typical = typical_ns_[kind].load(std::memory_order_relaxed);
  return static_cast<int64_t>(options_.backup_factor * static_cast<double>(typical)) +
         std::chrono::duration_cast<std::chrono::nanoseconds>(options_.backup_slack).count();
}

void TaskPool::place_sleepers_off(int cpu) {
  if (cpu < 0) return;
  for (int t = 1; t < total_threads(); ++t) {
    if (t < static_cast<int>(options_.pin_cores.size()) &&
        !options_.pin_cores[static_cast<size_t>(t)].empty())
      continue;
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

bool TaskPool::work_on(Record& rec, int thread, int64_t& wake_ns) {
  wake_ns = INT64_MAX;
  const int n = rec.num_tasks;
  const int threads = rec.threads;
  for (;;) {
    // This thread's own range first, then the others' in turn; the second phase's once it is
    // open.
    int claimed = -1;
    for (int part = 0; part < 2 && claimed < 0; ++part) {
      if (part == 1 && (rec.then == nullptr || !rec.open.load(std::memory_order_acquire))) break;
      Record::Cursor* cursors = part == 0 ? rec.cursors.get() : rec.then_cursors.get();
      for (int k = 0; k < threads && claimed < 0; ++k) {
        if (rec.failed.load(std::memory_order_acquire)) return false;
        Record::Cursor& c = cursors[(thread + k) % threads];
        if (c.next.load(std::memory_order_relaxed) >= c.end) continue;
        const int i = c.next.fetch_add(1, std::memory_order_acq_rel);
        if (i < c.end) claimed = i;
      }
    }
    if (claimed >= 0) {
      TaskState& ts = rec.tasks[claimed];
      ts.runners.store(1, std::memory_order_relaxed);
      ts.holder.store(thread, std::memory_order_relaxed);
      ts.holder_cpu.store(sched_getcpu(), std::memory_order_relaxed);
      ts.started_ns.store(now_ns(), std::memory_order_release);
      execute(rec, claimed, thread, false);
      continue;
    }
    if (rec.complete()) return false;
    // Nothing left to take: back up a task whose deadline passed or whose holder is descheduled.
    const int64_t now = now_ns();
    int64_t earliest = INT64_MAX;
    bool ran = false;
    // On a busy machine the caller backs up at once a task held on another CPU (see the header);
    // a holder on the caller's own CPU is left that CPU.
    const int here =
        thread == 0 && options_.eager_caller_backups && placing_.load(std::memory_order_relaxed)
            ? sched_getcpu()
            : -1;
    for (int j = 0; j < n && !ran; ++j) {
      TaskState& ts = rec.tasks[j];
      if (ts.done.load(std::memory_order_acquire) != 0) continue;
      if (ts.runners.load(std::memory_order_acquire) != 1) continue;
      const int64_t started = ts.started_ns.load(std::memory_order_acquire);
      if (started == 0) continue;
      const int64_t deadline = started + backup_threshold_ns(rec.kind_of(j));
      const bool eager = here >= 0 && ts.holder_cpu.load(std::memory_order_relaxed) != here;
      if (!eager && now < deadline && !holder_descheduled(ts, now, wake_ns)) {
        earliest = std::min(earliest, deadline);
        continue;
      }
      uint32_t one = 1;
      if (ts.runners.compare_exchange_strong(one, 2, std::memory_order_acq_rel)) {
        if (eager && now < deadline) eager_backups_.fetch_add(1, std::memory_order_relaxed);
        execute(rec, j, thread, true);
        ran = true;
      }
    }
    if (ran) continue;
    wake_ns = std::min(wake_ns, earliest);
    return !rec.complete();
  }
}

void TaskPool::wait_for_progress(Record& rec, int /*thread*/, int64_t wake_ns) {
  profiler::ScopedSpan wait(profiler::Phase::wait);
  // The wait at the end of a phase is usually for one task on another thread that is about to
  // commit: with a spare core, watching for it costs nothing and saves a futex wake-up (tens of
  // microseconds on a VM, several times per step). The spin stays shorter than a backup deadline,
  // so a straggler still gets its backup from the futex path below.
  if (spin_ok_.load(std::memory_order_relaxed)) {
    const uint32_t seen = rec.progress.load(std::memory_order_acquire);
    const auto until = Clock::now() + options_.spin;
    for (int i = 0;; ++i) {
      os::cpu_relax();
      if (rec.progress.load(std::memory_order_acquire) != seen || rec.complete()) return;
      if ((i & 63) == 63 && Clock::now() > until) break;
    }
  }
  rec.waiters.fetch_add(1, std::memory_order_seq_cst);
  const uint32_t p = rec.progress.load(std::memory_order_seq_cst);
  if (!rec.complete()) {
    // Sleep until a commit (or failure), or until a backup may be due: work_on's wake_ns, or the
    // deadline of a task claimed since its scan (a task claimed but not yet stamped: look again
    // soon).
    const int64_t now = now_ns();
    for (int j = 0; j < rec.num_tasks; ++j) {
      TaskState& ts = rec.tasks[j];
      if (ts.done.load(std::memory_order_acquire) != 0) continue;
      if (ts.runners.load(std::memory_order_acquire) != 1) continue;
      const int64_t started = ts.started_ns.load(std::memory_order_acquire);
      wake_ns = std::min(
          wake_ns, started != 0 ? started + backup_threshold_ns(rec.kind_of(j)) : now + 50000);
    }
    if (wake_ns == INT64_MAX) {
      os::futex_wait(&rec.progress, p);
    } else {
      os::futex_wait_for(&rec.progress, p,
                         std::chrono::nanoseconds(std::max<int64_t>(wake_ns - now_ns(), 0)));
    }
  }
  rec.waiters.fetch_sub(1, std::memory_order_seq_cst);
}

bool TaskPool::in_backup_run() {
  // execute() asks for fine cancellation checks exactly for backup runs.
  return task_wants_fine_checks();
}

void TaskPool::execute(Record& rec, int task, int thread, bool backup) {
  TaskState& ts = rec.tasks[task];
  // Counted before `done` is read: a caller in wait_for_runs_before that saw no run of this
  // phase under way has seen every task done, so a run that starts after that stops here (the
  // caller may be overwriting what it would read). A thread descheduled on its way here, or
  // while looking for work, holds nobody.
  rec.executing.fetch_add(1, std::memory_order_seq_cst);
  struct Executing {
    Record& rec;
    ~Executing() { rec.stop_executing(); }
  } executing{rec};
  if (has_hook_.load(std::memory_order_acquire)) {
    RunHook hook;
    {
      std::lock_guard lock(hook_mu_);
      hook = hook_;
    }
    if (hook) {
      hook(rec.kind_of(task), rec.local(task), thread, backup,
           rec.sequence.load(std::memory_order_acquire));
    }
  }
  if (ts.done.load(std::memory_order_seq_cst) != 0) {
    // Its twin committed (or the phase failed) while this run was on its way: nothing to do.
    cancelled_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ScopedFlushDenormal flush;
  profiler::BackupRunScope backup_run(backup);
  profiler::ScopedSpan trace;
  TaskPhase& phase = rec.phase_of(task);
  const int local = rec.local(task);
  if (profiler::recording()) trace.open(phase.trace_phase(), phase.trace_replica(local));
  runs_.fetch_add(1, std::memory_order_relaxed);
  if (backup) backups_.fetch_add(1, std::memory_order_relaxed);
  const int64_t t0 = now_ns();
  void* result = nullptr;
  auto fail = [&](std::exception_ptr e) {
    {
      std::lock_guard lock(rec.error_mu);
      if (task < rec.error_task) {
        rec.error = std::move(e);
        rec.error_task = task;
      }
    }
    rec.failed.store(true, std::memory_order_release);
    for (int j = 0; j < rec.num_tasks; ++j) rec.tasks[j].done.store(1, std::memory_order_seq_cst);
    rec.bump_progress();
  };
  try {
    TaskCancellationScope scope(&ts.done, /*fine=*/backup);
    result = phase.run(local, thread);
  } catch (const TaskCancelled&) {
    cancelled_.fetch_add(1, std::memory_order_relaxed);
    return;
  } catch (...) {
    // A run whose twin already committed is discarded whatever it threw.
    if (ts.done.load(std::memory_order_acquire) == 0) fail(std::current_exception());
    return;
  }
  if (ts.done.exchange(1, std::memory_order_seq_cst) == 0) {
    try {
      phase.commit(local, result);
    } catch (...) {
      fail(std::current_exception());
      return;
    }
    const int64_t d = now_ns() - t0;
    const int kind = rec.kind_of(task);
    const int64_t old = typical_ns_[kind].load(std::memory_order_relaxed);
    typical_ns_[kind].store(old == 0 ? d : old + (d - old) / 4, std::memory_order_relaxed);
    if (backup) backup_wins_.fetch_add(1, std::memory_order_relaxed);
    if (rec.committed.fetch_add(1, std::memory_order_acq_rel) + 1 == rec.split &&
        rec.then != nullptr) {
      // This commit completed the first phase: its end, then the second phase opens, on this
      // thread — whoever finishes the first phase goes on to the second without a wake-up.
      try {
        rec.phase->phase_done();
      } catch (...) {
        fail(std::current_exception());
        return;
      }
      rec.open.store(true, std::memory_order_release);
    }
    rec.bump_progress();
  } else {
    phase.discard(local, result);
  }
}

}  // namespace lockstep::distribute
