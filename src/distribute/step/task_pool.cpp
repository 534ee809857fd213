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

#include "task_pool_record.h"

namespace lockstep::distribute {

using namespace task_pool_detail;

namespace {
// How long the caller yields its CPU to a helper it pulled there (pull_late_runners) before it
// sleeps: the rest of one kernel call, usually; a scheduler slice at most.
constexpr int64_t kPulledRunYieldNs = 4'000'000;
}  // namespace

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
  return {sequence_,         runs_.load(),       backups_.load(),       backup_wins_.load(),
          cancelled_.load(), placements_.load(), eager_backups_.load(), pulls_.load()};
}

uint64_t TaskPool::run(TaskPhase& phase) {
  return run_phases(phase, nullptr);
}

uint64_t TaskPool::run(TaskPhase& first, TaskPhase& then) {
  return run_phases(first, &then);
}

namespace {

// The threads' own ranges of a phase's tasks (numbered from `first`): contiguous, and as equal
// in cost as whole tasks allow — task i goes to the thread whose share of the total cost holds
// the middle of its own. A thread whose range is empty starts by helping the others.
template <class Cursor>
void split_by_cost(const TaskPhase& phase, int first, Cursor* cursors, int threads) {
  const int n = phase.num_tasks();
  int64_t total = 0;
  for (int i = 0; i < n; ++i) total += std::max<int64_t>(phase.task_cost(i), 1);
  int64_t before = 0;
  int begin = 0, t = 0;
  for (int i = 0; i < n; ++i) {
    const int64_t cost = std::max<int64_t>(phase.task_cost(i), 1);
    const int owner = static_cast<int>((2 * before + cost) * threads / (2 * total));
    for (; t < owner; ++t) {
      cursors[t].reset(first + begin, first + i);
      begin = i;
    }
    before += cost;
  }
  for (; t < threads; ++t) {
    cursors[t].reset(first + begin, first + n);
    begin = n;
  }
}

}  // namespace

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
  backed_up_.store(false, std::memory_order_seq_cst);
  register_cpu_clock(0);
  rec.phase = &phase;
  rec.then = then;
  rec.split = split;
  rec.num_tasks = n;
  rec.kinds[0] = std::clamp(phase.kind(), 0, kMaxKinds - 1);
  rec.kinds[1] = then != nullptr ? std::clamp(then->kind(), 0, kMaxKinds - 1) : rec.kinds[0];
  rec.allows_backups[0].store(phase.allows_backups(), std::memory_order_relaxed);
  rec.allows_backups[1].store(then != nullptr ? then->allows_backups() : true,
                              std::memory_order_relaxed);
  if (then != nullptr && split == 0) {
    phase.phase_done();  // nothing to wait for
    rec.allows_backups[1].store(then->allows_backups(), std::memory_order_relaxed);
  }
  rec.open.store(then == nullptr || split == 0, std::memory_order_relaxed);
  if (!threads_.empty()) spinning_allowed();
  rec.threads = phase_threads_.load(std::memory_order_relaxed);
  split_by_cost(phase, 0, rec.cursors.get(), rec.threads);
  if (then != nullptr) split_by_cost(*then, split, rec.then_cursors.get(), rec.threads);
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
  // Of two chained phases the first's answer stands (set before its phase_done()).
  if (then == nullptr) backed_up_.store(any_backed_up(rec, 0, n), std::memory_order_seq_cst);
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
      // Usually a run of the last step between its commit and its return: watched for, with a
      // spare core, rather than slept on (as wait_for_progress does).
      auto done = [&] { return r->executing.load(std::memory_order_acquire) == 0; };
      if (spin_ok_.load(std::memory_order_relaxed)) os::spin_until(options_.spin, done);
      // Yielded to rather than slept beside: asleep, the caller, once the run woke it, could wait
      // a scheduler slice for its own CPU. Bounded by about one slice, after which it sleeps.
      if (!done() && placing_.load(std::memory_order_relaxed) &&
          pull_late_runners(sequence, sched_getcpu()) > 0) {
        const int64_t until = now_ns() + kPulledRunYieldNs;
        while (!done() && now_ns() < until) sched_yield();
      }
      r->wait_executed();
    }
  }
}

void TaskPool::wake_idle() {
  const uint64_t seq = current_.load(std::memory_order_acquire);
  if (seq != 0) ring_[seq % kRing]->bump_progress();
}

int64_t TaskPool::backup_threshold_ns(int kind) const {
  const int64_t typical = typical_ns_[kind].load(std::memory_order_relaxed);
  return static_cast<int64_t>(options_.backup_factor * static_cast<double>(typical)) +
         std::chrono::duration_cast<std::chrono::nanoseconds>(options_.backup_slack).count();
}

bool TaskPool::work_on(Record& rec, int thread, int64_t& wake_ns) {
  wake_ns = INT64_MAX;
  const int n = rec.num_tasks;
  const int threads = rec.threads;
  for (;;) {
    // The first phase's idle work before the second phase's tasks, where chosen
    // (TaskPoolOptions::idle_work_before_chained_phase); once the second is open, every task of
    // the first is done.
    if (idle_work_before_chained_phase_ && rec.then != nullptr &&
        rec.open.load(std::memory_order_acquire) && idle_work(rec, thread))
      continue;
    // This thread's own range first, then the others' in turn; the second phase's once it is
    // open.
    int claimed = -1;
    for (int part = 0; part < 2 && claimed < 0; ++part) {
      if (part == 1 && (rec.then == nullptr || !rec.open.load(std::memory_order_acquire))) break;
      Record::Cursor* cursors = part == 0 ? rec.cursors.get() : rec.then_cursors.get();
      for (int k = 0; k < threads && claimed < 0; ++k) {
        if (rec.failed.load(std::memory_order_acquire)) return false;
        claimed = cursors[(thread + k) % threads].claim(/*from_back=*/k != 0);
      }
    }
    if (claimed < 0 && idle_work(rec, thread)) continue;
    if (claimed >= 0) {
      TaskState& ts = rec.tasks[claimed];
      // Release: a thread that sees this claim when it looks for a task to back up also sees what
      // the claimer saw of the phase (a chained phase's state, set before it opened).
      ts.runners.store(1, std::memory_order_release);
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
      if (!rec.allows_backup(j)) continue;
      const int64_t started = ts.started_ns.load(std::memory_order_acquire);
      if (started == 0) continue;
      const int64_t deadline = started + backup_threshold_ns(rec.kind_of(j));
      const bool eager = here >= 0 && ts.holder_cpu.load(std::memory_order_relaxed) != here;
      if (!eager && now < deadline && !holder_descheduled(ts, now, wake_ns)) {
        earliest = std::min(earliest, deadline);
        continue;
      }
      uint32_t one = 1;
      // Sequentially consistent, as the task's `done` is: a backup that goes on to read its
      // task's inputs (done still 0 after this claim) is seen by last_phase_backed_up().
      if (ts.runners.compare_exchange_strong(one, 2, std::memory_order_seq_cst)) {
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

bool TaskPool::any_backed_up(const Record& rec, int begin, int end) {
  for (int j = begin; j < end; ++j)
    if (rec.tasks[j].runners.load(std::memory_order_seq_cst) > 1) return true;
  return false;
}

bool TaskPool::idle_work(Record& rec, int thread) {
  // Counted as executing (as execute() does), so that whoever retires the phase waits for it.
  const Record::Executing executing(rec);
  if (rec.complete()) return false;
  // The task this thread was dealt first, which it runs again next time, where that is chosen
  // (TaskPoolOptions::idle_work_prefers_own_task) and the machine is quiet: what its idle work
  // prepares lands in its own core's cache. Otherwise a task not done yet: on a busy machine its
  // holder may be descheduled and hold the step up.
  int preferred = idle_work_prefers_own_task_ && thread < rec.threads &&
                          !placing_.load(std::memory_order_relaxed)
                      ? rec.cursors[thread].dealt_front.load(std::memory_order_relaxed)
                      : -1;
  for (int j = 0; j < rec.split && preferred < 0; ++j)
    if (rec.tasks[j].done.load(std::memory_order_acquire) == 0) preferred = j;
  try {
    return rec.phase->idle_work(preferred);
  } catch (...) {
    // Idle work keeps its errors for the tasks that need its results (StepInput::stage).
    return false;
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
    if (os::spin_until(options_.spin, [&] {
          return rec.progress.load(std::memory_order_acquire) != seen || rec.complete();
        }))
      return;
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
      if (!rec.allows_backup(j)) continue;
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
  const Record::Executing executing(rec);
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
      backed_up_.store(any_backed_up(rec, 0, rec.split), std::memory_order_seq_cst);
      try {
        rec.phase->phase_done();
        // Published by the release below, and on by each claim's (work_on).
        rec.allows_backups[1].store(rec.then->allows_backups(), std::memory_order_relaxed);
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
