// TaskPool: every task commits exactly once whatever the number of threads; the threads' own
// ranges are cut by cost and others' tasks taken from the far end; a task whose thread
// stalls (held in a test hook, not slept on) is finished by a backup run on another thread; a
// failing task's error reaches the caller; a chained second phase starts only once the first has
// committed and ended.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <cmath>

#include "core/cpu_affinity.h"
#include "distribute/step/task_pool.h"
#include "lockstep/core/denormals.h"
#include "lockstep/core/error.h"
#include "lockstep/core/task_cancellation.h"

namespace lockstep::distribute {
namespace {

// Each task computes a value from its index into a private result; commits count per task.
class CountingPhase : public TaskPhase {
 public:
  explicit CountingPhase(int n) : n_(n), commits_(static_cast<size_t>(n)), values_(n) {}
  int num_tasks() const override { return n_; }
  void* run(int task, int thread) override {
    check_task_cancelled();
    auto* r = new Result{task, thread, 0};
    for (int i = 0; i <= task; ++i) r->value += i;
    return r;
  }
  void commit(int task, void* result) override {
    auto* r = static_cast<Result*>(result);
    commits_[static_cast<size_t>(task)].fetch_add(1);
    values_[static_cast<size_t>(task)] = r->value;
    committed_by_.push_back_locked(task, r->thread);
    delete r;
  }
  void discard(int, void* result) override {
    discards_.fetch_add(1);
    delete static_cast<Result*>(result);
  }

  struct Result {
    int task, thread;
    long value;
  };
  struct Owners {
    std::mutex mu;
    std::vector<std::pair<int, int>> v;
    void push_back_locked(int task, int thread) {
      std::lock_guard lock(mu);
      v.emplace_back(task, thread);
    }
  };
  int n_;
  std::vector<std::atomic<int>> commits_;
  std::vector<long> values_;
  std::atomic<int> discards_{0};
  Owners committed_by_;
};

TEST(TaskPool, CommitsEveryTaskExactlyOnceOnAnyNumberOfThreads) {
  for (int threads : {1, 2, 3, 5}) {
    TaskPool pool({.num_threads = threads});
    for (int round = 0; round < 20; ++round) {
      CountingPhase phase(13);
      pool.run(phase);
      for (int t = 0; t < 13; ++t) {
        EXPECT_EQ(phase.commits_[static_cast<size_t>(t)].load(), 1) << "task " << t;
        EXPECT_EQ(phase.values_[static_cast<size_t>(t)], static_cast<long>(t) * (t + 1) / 2);
      }
      pool.wait_for_runs_before(UINT64_MAX);  // losers (if any) must be gone before `phase` is
    }
  }
}

// Holds the helper thread's first primary run in the pool's run hook until release() (or, should
// the phase never complete without it, a minute — then the test's checks fail instead of hanging);
// the caller's first run waits until the helper holds its task, so that one task is held.
class HeldHelperRun {
 public:
  explicit HeldHelperRun(TaskPool& pool) : pool_(pool) {
    pool.set_run_hook([this](int, int task, int thread, bool backup, uint64_t) {
      std::unique_lock lock(mu_);
      if (backup) return;
      if (thread != 0 && held_task_ < 0) {
        held_task_ = task;
        cv_.notify_all();
        cv_.wait_for(lock, std::chrono::minutes(1), [&] { return released_; });
        if (on_release_) on_release_();
      } else if (thread == 0 && held_task_ < 0) {
        cv_.wait(lock, [&] { return held_task_ >= 0; });
      }
    });
  }
  ~HeldHelperRun() { pool_.set_run_hook({}); }
  // Called by the held run once released, before it goes on.
  void set_on_release(std::function<void()> f) {
    std::lock_guard lock(mu_);
    on_release_ = std::move(f);
  }
  // Checks that the held task was committed by the caller's backup run, then lets the held run go.
  void expect_backup_committed_and_release(const CountingPhase& phase) {
    std::lock_guard lock(mu_);
    EXPECT_GE(held_task_, 0);
    for (const auto& [task, thread] : phase.committed_by_.v) {
      if (task == held_task_) {
        EXPECT_EQ(thread, 0) << "the held task was committed by its backup";
      }
    }
    released_ = true;
    cv_.notify_all();
  }

 private:
  TaskPool& pool_;
  std::mutex mu_;
  std::condition_variable cv_;
  int held_task_ = -1;
  bool released_ = false;
  std::function<void()> on_release_;
};

TEST(TaskPool, AStalledTaskIsFinishedByABackupRunOnAnotherThread) {
  TaskPool pool({.num_threads = 2, .backup_slack = std::chrono::microseconds(100)});
  HeldHelperRun held(pool);
  CountingPhase phase(2);
  pool.run(phase);  // returns although the helper is still held: the backup committed its task
  held.expect_backup_committed_and_release(phase);
  pool.wait_for_runs_before(UINT64_MAX);
  EXPECT_EQ(phase.commits_[0].load(), 1);
  EXPECT_EQ(phase.commits_[1].load(), 1);
  const TaskPoolStats s = pool.stats();
  EXPECT_EQ(s.backup_wins, 1u);
  // The stalled run, released, found its task done: cancelled at its first check.
  EXPECT_EQ(s.cancelled + static_cast<uint64_t>(phase.discards_.load()), 1u);
}

// A phase whose tasks write what they read (TaskPhase::allows_backups false, as an update in
// place) gets no backup run, though its held task is past every deadline (no slack, and the first
// phase of a pool has no typical run time yet): the caller holds its task 0 in the run hook until
// the helper, done with task 1, has looked for work twice (woken by wake_idle; its first look's
// backup scan ends before the second look begins) — or until task 0 was committed, which only a
// backup could have done. The same phase allowing backups gets one, which commits task 0.
// last_phase_backed_up says which.
class PhaseOfTwo : public CountingPhase {
 public:
  explicit PhaseOfTwo(bool allows_backups) : CountingPhase(2), allows_backups_(allows_backups) {}
  bool allows_backups() const override { return allows_backups_; }
  bool idle_work(int) override {
    if (TaskPool::on_helper_thread()) helper_looks.fetch_add(1);
    return false;
  }
  std::atomic<int> helper_looks{0};
  std::atomic<bool> caller_holds{false};

 private:
  bool allows_backups_;
};

TEST(TaskPool, APhaseThatAllowsNoBackupsGetsNone) {
  for (bool allows : {false, true}) {
    SCOPED_TRACE(allows ? "backups allowed" : "no backups");
    TaskPool pool(
        {.num_threads = 2, .backup_factor = 1.0, .backup_slack = std::chrono::microseconds(0)});
    PhaseOfTwo phase(allows);
    pool.set_run_hook([&](int, int task, int thread, bool backup, uint64_t) {
      if (backup) return;
      if (thread != 0) {
        // The helper's first run waits until the caller holds task 0 (it cannot take task 0 then).
        while (!phase.caller_holds.load()) std::this_thread::yield();
        return;
      }
      if (task != 0) return;
      phase.caller_holds = true;
      while (phase.helper_looks.load() < 2 && phase.commits_[0].load() == 0) pool.wake_idle();
    });
    pool.run(phase);
    pool.set_run_hook({});
    pool.wait_for_runs_before(UINT64_MAX);
    EXPECT_EQ(phase.commits_[0].load(), 1);
    EXPECT_EQ(phase.commits_[1].load(), 1);
    EXPECT_EQ(pool.stats().backups, allows ? 1u : 0u);
    EXPECT_EQ(pool.last_phase_backed_up(), allows);
    for (const auto& [task, thread] : phase.committed_by_.v) {
      if (task == 0) {
        EXPECT_EQ(thread, allows ? 1 : 0) << "who committed task 0";
      }
    }
  }
}

// wait_for_runs_before returns only once a losing run still under way has returned, whether it
// watched for that (a spare core) or slept on it. The waiter announces itself before the held run
// is released; it checks as it returns that the release happened, and the held run checks as it
// goes on that the waiter has not returned. A wait that returned at once would be caught in most
// rounds (whichever thread gets there first), so the test runs several.
TEST(TaskPool, WaitingForEarlierRunsReturnsOnlyAfterALoserStillRunningEnds) {
  for (int round = 0; round < 8; ++round) {
    TaskPool pool({.num_threads = 2, .backup_slack = std::chrono::microseconds(100)});
    HeldHelperRun held(pool);
    std::atomic<bool> waiting{false}, releasing{false}, waiter_returned{false}, early{false};
    held.set_on_release([&] {
      if (waiter_returned.load()) early = true;
    });
    CountingPhase phase(2);
    pool.run(phase);  // the caller's backup committed the held task
    std::thread waiter([&] {
      waiting = true;
      pool.wait_for_runs_before(UINT64_MAX);
      if (!releasing.load()) early = true;
      waiter_returned = true;
    });
    while (!waiting.load()) std::this_thread::yield();
    releasing = true;
    held.expect_backup_committed_and_release(phase);
    waiter.join();
    EXPECT_FALSE(early.load()) << "round " << round << ": returned while the loser still ran";
    EXPECT_EQ(phase.commits_[0].load(), 1);
    EXPECT_EQ(phase.commits_[1].load(), 1);
  }
}

// A helper descheduled after joining a phase, before it takes a task (here: held in the join
// hook), holds nobody: the caller runs that phase and the next ones by itself, and
// wait_for_runs_before, which waits for runs under way and not for threads looking for work,
// returns while the helper is still held. (Were it waited for, the hook would give up after a
// minute and the check on `hook_returned` would fail.) Released, the helper finds nothing to run.
TEST(TaskPool, AHelperHeldBeforeItTakesATaskHoldsNobody) {
  TaskPool pool({.num_threads = 2});
  std::mutex mu;
  std::condition_variable cv;
  bool held = false, released = false, hook_returned = false;
  pool.set_join_hook([&](int thread, uint64_t phase) {
    std::unique_lock lock(mu);
    if (thread != 1 || phase != 1 || held) return;
    held = true;
    cv.notify_all();
    cv.wait_for(lock, std::chrono::minutes(1), [&] { return released; });
    hook_returned = true;
    cv.notify_all();
  });
  CountingPhase first(4);
  pool.run(first);
  {
    // The helper joins phase 1 whether it woke before the caller finished it or after.
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::minutes(1), [&] { return held; });
    ASSERT_TRUE(held);
  }
  std::vector<std::unique_ptr<CountingPhase>> later;
  for (int i = 0; i < 20; ++i) {
    later.push_back(std::make_unique<CountingPhase>(3));
    pool.run(*later.back());
  }
  pool.wait_for_runs_before(UINT64_MAX);
  {
    std::unique_lock lock(mu);
    EXPECT_FALSE(hook_returned) << "the caller waited for a helper that ran nothing";
    released = true;
    cv.notify_all();
    cv.wait_for(lock, std::chrono::minutes(1), [&] { return hook_returned; });
  }
  pool.wait_for_runs_before(UINT64_MAX);
  pool.set_join_hook({});
  std::vector<const CountingPhase*> all{&first};
  for (const auto& p : later) all.push_back(p.get());
  for (const CountingPhase* p : all) {
    for (int t = 0; t < p->n_; ++t) EXPECT_EQ(p->commits_[static_cast<size_t>(t)].load(), 1);
  }
  const TaskPoolStats s = pool.stats();
  EXPECT_EQ(s.runs, 4u + 20u * 3u) << "every run was the caller's, none a backup";
  EXPECT_EQ(s.backups, 0u);
}

// The threads' own ranges are cut by cost, and a thread done with its own takes the others' tasks
// from the far end. Task 0 costs as much as the other six together, so it is the caller's whole
// range; with the helper held before it takes anything, the caller runs task 0, then the
// helper's range backwards. (Cut by count and taken from the front, the order would be 0..6.)
TEST(TaskPool, RangesAreCutByCostAndAnotherThreadsTasksAreTakenFromTheFarEnd) {
  class CostedPhase : public CountingPhase {
   public:
    CostedPhase() : CountingPhase(7) {}
    int64_t task_cost(int task) const override { return task == 0 ? 6 : 1; }
  };
  TaskPool pool({.num_threads = 2});
  std::mutex mu;
  std::condition_variable cv;
  bool held = false, released = false;
  std::vector<int> caller_order;
  pool.set_join_hook([&](int thread, uint64_t) {
    std::unique_lock lock(mu);
    if (thread != 1 || held) return;
    held = true;
    cv.wait_for(lock, std::chrono::minutes(1), [&] { return released; });
  });
  pool.set_run_hook([&](int, int task, int thread, bool backup, uint64_t) {
    std::lock_guard lock(mu);
    if (thread == 0 && !backup) caller_order.push_back(task);
  });
  CostedPhase phase;
  pool.run(phase);
  {
    std::lock_guard lock(mu);
    released = true;
    cv.notify_all();
  }
  pool.wait_for_runs_before(UINT64_MAX);
  pool.set_join_hook({});
  pool.set_run_hook({});
  EXPECT_EQ(caller_order, (std::vector<int>{0, 6, 5, 4, 3, 2, 1}));
  for (int t = 0; t < phase.n_; ++t) EXPECT_EQ(phase.commits_[static_cast<size_t>(t)].load(), 1);
}

// A holder that gets no CPU (here: blocked in the hook, as a thread whose core the OS gave to
// another process) is backed up as soon as an idle thread sees its CPU clock stand still, long
// before the deadline — which this pool sets out of reach. Were it not, the held run would wait
// in the hook for a minute and then commit the task itself, and the check would fail.
TEST(TaskPool, ADescheduledHolderIsBackedUpBeforeTheDeadline) {
  TaskPool pool({.num_threads = 2,
                 .backup_factor = 1e9,
                 .backup_slack = std::chrono::hours(1),
                 .stall_window = std::chrono::microseconds(50)});
  HeldHelperRun held(pool);
  CountingPhase phase(2);
  pool.run(phase);
  held.expect_backup_committed_and_release(phase);
  pool.wait_for_runs_before(UINT64_MAX);
  EXPECT_EQ(pool.stats().backup_wins, 1u);
}

// A run hook under which the pool's other threads wait (at most a minute: a thread that never
// joins fails the test's check instead of hanging it) until thread `t` has started a task, running
// `on_start` there first; so `t` cannot be left without a task. Clear the pool's hook before this
// goes.
class WaitForThread {
 public:
  WaitForThread(TaskPool& pool, int t, std::function<void()> on_start = {}) {
    pool.set_run_hook([this, t, on_start](int, int, int thread, bool, uint64_t) {
      std::unique_lock lock(mu_);
      if (thread == t) {
        if (on_start) on_start();
        started_ = true;
        cv_.notify_all();
      } else {
        cv_.wait_for(lock, std::chrono::minutes(1), [&] { return started_; });
      }
    });
  }
  bool started() {
    std::lock_guard lock(mu_);
    return started_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
};

// The busy-machine extra thread (index 2 here) takes part only while the machine is busy: never
// while it is quiet, and while busy it takes a task of its own (the two others wait in the run
// hook until it has started one, so it cannot be left without).
TEST(TaskPool, BusyMachineExtrasTakeTasksOnlyWhileTheMachineIsBusy) {
  std::atomic<bool> busy{false};
  // No backups: under load a run of the extra's task that lost to a backup by another thread
  // committed nothing, and the check below failed.
  TaskPool pool({.num_threads = 2,
                 .backup_factor = 1e9,
                 .backup_slack = std::chrono::hours(1),
                 .stall_window = std::chrono::microseconds(0),
                 .busy_extra_threads = 1,
                 .machine_busy = [&] { return busy.load(); }});
  ASSERT_EQ(pool.total_threads(), 3);
  auto threads_that_committed = [](const CountingPhase& phase) {
    std::set<int> threads;
    for (const auto& [task, thread] : phase.committed_by_.v) threads.insert(thread);
    return threads;
  };
  for (int round = 0; round < 10; ++round) {
    CountingPhase quiet(7);
    pool.run(quiet);
    pool.wait_for_runs_before(UINT64_MAX);
    EXPECT_EQ(threads_that_committed(quiet).count(2), 0u) << "quiet round " << round;
  }
  busy = true;
  WaitForThread extra(pool, 2);
  CountingPhase shared(3);
  pool.run(shared);
  pool.wait_for_runs_before(UINT64_MAX);
  pool.set_run_hook({});
  // It took a task of its own (on a busy machine the caller may back that task up at once and
  // win: which run commits is not the point here).
  EXPECT_TRUE(extra.started());
  for (int t = 0; t < 3; ++t) EXPECT_EQ(shared.commits_[static_cast<size_t>(t)].load(), 1);
  busy = false;
  for (int round = 0; round < 10; ++round) {
    CountingPhase quiet(7);
    pool.run(quiet);
    pool.wait_for_runs_before(UINT64_MAX);
    EXPECT_EQ(threads_that_committed(quiet).count(2), 0u) << "quiet again, round " << round;
  }
}

// The calling thread's affinity, and a mask of its first CPU alone.
struct CallerMasks {
  cpu_set_t original, only_first;
};
CallerMasks caller_masks() {
  CallerMasks m;
  CPU_ZERO(&m.original);
  CPU_ZERO(&m.only_first);
  if (sched_getaffinity(0, sizeof m.original, &m.original) != 0) CPU_ZERO(&m.original);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &m.original)) {
      CPU_SET(c, &m.only_first);
      break;
    }
  }
  return m;
}

// On a busy machine a helper asleep on the caller's CPU is woken elsewhere (the kernel would wake
// it beside its waker, behind it), for that wake-up only; never on a quiet machine. The helper is
// made to sleep on the caller's CPU by binding itself there during a first phase (its own mask,
// kept by the pool from its start, stays the whole machine).
TEST(TaskPool, OnABusyMachineAHelperAsleepOnTheCallersCpuWakesElsewhere) {
  const CallerMasks masks = caller_masks();
  ASSERT_GT(CPU_COUNT(&masks.original), 0);
  const cpu_set_t& original = masks.original;
  const cpu_set_t& only_here = masks.only_first;
  for (const bool busy : {false, true}) {
    TaskPool pool({.num_threads = 2, .machine_busy = [busy] { return busy; }});
    pid_t helper_tid = 0;
    ASSERT_EQ(sched_setaffinity(0, sizeof only_here, &only_here), 0);
    {
      WaitForThread helper_bound(pool, 1, [&] {
        sched_setaffinity(0, sizeof only_here, &only_here);
        helper_tid = static_cast<pid_t>(syscall(SYS_gettid));
      });
      CountingPhase first(2);
      pool.run(first);
      pool.wait_for_runs_before(UINT64_MAX);
      pool.set_run_hook({});
      ASSERT_TRUE(helper_bound.started());
    }
    // The helper goes to sleep on `only_here` (bound there); wait for it, by its state, not by
    // time.
    while (pool.asleep_helpers() < 1) std::this_thread::yield();
    // The second phase: the caller waits until the helper has taken a task, so the helper has
    // woken (and, if moved, put its mask back) before the checks below.
    WaitForThread helper_ran(pool, 1);
    // (The first phase may have woken the helper off `only_here` already, if it had gone to sleep
    // there when it started: count this phase's placements only.)
    const uint64_t placed_before = pool.stats().placements;
    CountingPhase second(2);
    pool.run(second);
    pool.wait_for_runs_before(UINT64_MAX);
    pool.set_run_hook({});
    ASSERT_TRUE(helper_ran.started());
    ASSERT_EQ(sched_setaffinity(0, sizeof original, &original), 0);
    const bool movable = CPU_COUNT(&original) > 1;
    EXPECT_EQ(pool.stats().placements - placed_before, busy && movable ? 1u : 0u)
        << (busy ? "busy" : "quiet");
    if (!busy) {
      EXPECT_EQ(pool.stats().placements, 0u);
    }
    // Woken, the helper put back the mask it started with (the whole machine), not the one it
    // bound itself to; quiet, it was not moved and keeps its own binding.
    cpu_set_t mask;
    CPU_ZERO(&mask);
    ASSERT_EQ(sched_getaffinity(helper_tid, sizeof mask, &mask), 0);
    if (busy && movable) {
      EXPECT_TRUE(CPU_EQUAL(&mask, &original));
    } else {
      EXPECT_TRUE(CPU_EQUAL(&mask, &only_here));
    }
  }
}

// On a busy machine the caller does not sleep while a task is held on another CPU: it backs the
// task up at once (an eager backup), although the holder is far from its deadline and not seen
// stalled. A holder on the caller's own CPU is left that CPU: the caller backs it up only once it
// has seen the holder make no progress (here the holder waits in the run hook). The helper is
// pinned (TaskPoolOptions::pin_cores), the caller bound for the test.
TEST(TaskPool, OnABusyMachineTheCallerBacksUpATaskHeldOnAnotherCpuAtOnce) {
  cpu_set_t original;
  CPU_ZERO(&original);
  ASSERT_EQ(sched_getaffinity(0, sizeof original, &original), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &original)) cpus.push_back(c);
  ASSERT_FALSE(cpus.empty());
  auto only = [](int cpu) {
    cpu_set_t m;
    CPU_ZERO(&m);
    CPU_SET(cpu, &m);
    return m;
  };
  const cpu_set_t caller_cpu = only(cpus.front());
  for (const bool same_cpu : {false, true}) {
    // On one CPU the helper shares the caller's whichever case this is.
    const int helper = same_cpu ? cpus.front() : cpus.back();
    const bool eager = helper != cpus.front();
    TaskPool pool({.num_threads = 2,
                   .pin_cores = {{}, {helper}},
                   .backup_factor = 1e9,
                   .backup_slack = std::chrono::hours(1),
                   .stall_window = std::chrono::microseconds(50),
                   .machine_busy = [] { return true; }});
    ASSERT_EQ(sched_setaffinity(0, sizeof caller_cpu, &caller_cpu), 0);
    {
      HeldHelperRun held(pool);
      CountingPhase phase(2);
      pool.run(phase);  // returns while the helper's run is held: its backup committed
      held.expect_backup_committed_and_release(phase);
      pool.wait_for_runs_before(UINT64_MAX);
    }
    ASSERT_EQ(sched_setaffinity(0, sizeof original, &original), 0);
    const TaskPoolStats s = pool.stats();
    EXPECT_EQ(s.backup_wins, 1u) << (same_cpu ? "same CPU" : "two CPUs");
    EXPECT_EQ(s.eager_backups, eager ? 1u : 0u) << (same_cpu ? "same CPU" : "two CPUs");
  }
}

// On a busy machine, a helper whose run of a finished phase the caller must wait for is brought
// onto the caller's CPU (its affinity narrowed to that CPU) and puts its own mask back when it
// leaves the phase; on a quiet machine nothing moves. The helper's run is held in the run hook
// until it sees its affinity narrowed — polled, with a deadline after which the test fails
// rather than hangs; the caller, bound to one CPU for the test, meanwhile backs the task up,
// returns from run() and waits in wait_for_runs_before().
TEST(TaskPool, OnABusyMachineTheCallerPullsARunItWaitsForOntoItsCpu) {
  const CallerMasks masks = caller_masks();
  ASSERT_GT(CPU_COUNT(&masks.original), 0);
  const cpu_set_t& original = masks.original;
  const cpu_set_t& only_here = masks.only_first;
  for (const bool busy : {true, false}) {
    // Created before the caller binds itself: the helper's own mask is the whole machine.
    TaskPool pool({.num_threads = 2,
                   .backup_slack = std::chrono::microseconds(100),
                   .machine_busy = [busy] { return busy; }});
    std::atomic<int> held{-1};
    std::atomic<bool> narrowed{false};
    pool.set_run_hook([&](int, int task, int thread, bool backup, uint64_t) {
      if (backup) return;
      if (thread == 0) {
        // The caller's first run waits until the helper holds the other task.
        while (held.load() < 0) std::this_thread::yield();
        return;
      }
      int none = -1;
      if (!held.compare_exchange_strong(none, task)) return;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(busy ? 60 : 1);
      cpu_set_t mask;
      do {
        std::this_thread::yield();
        CPU_ZERO(&mask);
        sched_getaffinity(0, sizeof mask, &mask);
      } while (!CPU_EQUAL(&mask, &only_here) && std::chrono::steady_clock::now() < deadline);
      narrowed.store(CPU_EQUAL(&mask, &only_here));
    });
    ASSERT_EQ(sched_setaffinity(0, sizeof only_here, &only_here), 0);
    CountingPhase first(2);
    pool.run(first);  // returns once the held task's backup committed
    pool.wait_for_runs_before(UINT64_MAX);
    pool.set_run_hook({});
    ASSERT_EQ(sched_setaffinity(0, sizeof original, &original), 0);
    ASSERT_GE(held.load(), 0);
    for (int t = 0; t < 2; ++t) EXPECT_EQ(first.commits_[static_cast<size_t>(t)].load(), 1);
    const bool movable = CPU_COUNT(&original) > 1;
    if (busy) {
      EXPECT_EQ(pool.stats().pulls, 1u);
      EXPECT_TRUE(narrowed.load()) << "the held run never ran on the caller's CPU alone";
    } else {
      EXPECT_EQ(pool.stats().pulls, 0u);
      if (movable) {
        EXPECT_FALSE(narrowed.load()) << "quiet, the helper was moved";
      }
    }
    // The next phase's helper run sees the mask the helper started with.
    cpu_set_t next_mask;
    CPU_ZERO(&next_mask);
    {
      WaitForThread helper_ran(pool, 1,
                               [&] { sched_getaffinity(0, sizeof next_mask, &next_mask); });
      CountingPhase second(2);
      pool.run(second);
      pool.wait_for_runs_before(UINT64_MAX);
      pool.set_run_hook({});
      ASSERT_TRUE(helper_ran.started());
    }
    EXPECT_TRUE(CPU_EQUAL(&next_mask, &original)) << (busy ? "busy" : "quiet");
  }
}

// A first phase that counts its phase_done() calls and what its commits had reached then; a
// second phase whose runs record what of the first they saw when they started.
class FirstPhase : public CountingPhase {
 public:
  using CountingPhase::CountingPhase;
  void phase_done() override {
    int committed = 0;
    for (const auto& c : commits_) committed += c.load();
    committed_at_end_.store(committed);
    ends_.fetch_add(1);
  }
  std::atomic<int> ends_{0}, committed_at_end_{-1};
};

class SecondPhase : public CountingPhase {
 public:
  SecondPhase(int n, const FirstPhase& first) : CountingPhase(n), first_(first) {}
  void* run(int task, int thread) override {
    if (first_.ends_.load() != 1) early_.fetch_add(1);
    return CountingPhase::run(task, thread);
  }
  const FirstPhase& first_;
  std::atomic<int> early_{0};
};

TEST(TaskPool, ASecondPhaseStartsOnlyAfterEveryTaskOfTheFirstCommittedAndItsEnd) {
  for (int threads : {1, 2, 3, 5}) {
    TaskPool pool({.num_threads = threads});
    for (int round = 0; round < 20; ++round) {
      FirstPhase first(3);
      SecondPhase second(11, first);
      const uint64_t seq = pool.run(first, second);
      EXPECT_EQ(pool.stats().phases, seq) << "one sequence number";
      EXPECT_EQ(first.ends_.load(), 1);
      EXPECT_EQ(first.committed_at_end_.load(), 3) << "phase_done after the last commit";
      EXPECT_EQ(second.early_.load(), 0) << "a second-phase run started before the first ended";
      for (int t = 0; t < 3; ++t) EXPECT_EQ(first.commits_[static_cast<size_t>(t)].load(), 1);
      for (int t = 0; t < 11; ++t) {
        EXPECT_EQ(second.commits_[static_cast<size_t>(t)].load(), 1) << "task " << t;
        EXPECT_EQ(second.values_[static_cast<size_t>(t)], static_cast<long>(t) * (t + 1) / 2);
      }
      pool.wait_for_runs_before(UINT64_MAX);
    }
  }
}

// The helper stalls in the first phase: the caller's backup completes that phase, ends it and
// runs the whole second phase, and run() returns while the helper is still held.
TEST(TaskPool, AStalledFirstPhaseTaskIsBackedUpAndTheSecondPhaseFollows) {
  TaskPool pool({.num_threads = 2, .backup_slack = std::chrono::microseconds(100)});
  HeldHelperRun held(pool);
  FirstPhase first(2);
  SecondPhase second(4, first);
  pool.run(first, second);
  held.expect_backup_committed_and_release(first);
  pool.wait_for_runs_before(UINT64_MAX);
  EXPECT_EQ(first.ends_.load(), 1);
  EXPECT_EQ(second.early_.load(), 0);
  for (int t = 0; t < 4; ++t) EXPECT_EQ(second.commits_[static_cast<size_t>(t)].load(), 1);
  EXPECT_EQ(pool.stats().backup_wins, 1u);
}

class FailingEnd : public CountingPhase {
 public:
  using CountingPhase::CountingPhase;
  void phase_done() override { throw std::runtime_error("the first phase's end failed"); }
};

// An error at the end of the first phase fails the phase: no task of the second runs.
TEST(TaskPool, AnErrorEndingTheFirstPhaseReachesTheCallerAndTheSecondNeverRuns) {
  TaskPool pool({.num_threads = 3});
  FailingEnd first(4);
  CountingPhase second(5);
  EXPECT_THROW(
      {
        try {
          pool.run(first, second);
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "the first phase's end failed");
          throw;
        }
      },
      std::runtime_error);
  pool.wait_for_runs_before(UINT64_MAX);
  for (int t = 0; t < 5; ++t) EXPECT_EQ(second.commits_[static_cast<size_t>(t)].load(), 0);
  CountingPhase fine(7);
  pool.run(fine);
  for (int t = 0; t < 7; ++t) EXPECT_EQ(fine.commits_[static_cast<size_t>(t)].load(), 1);
}

class FailingPhase : public TaskPhase {
 public:
  int num_tasks() const override { return 6; }
  void* run(int task, int) override {
    if (task == 2 || task == 4)
      throw std::runtime_error("task " + std::to_string(task) + " failed");
    return nullptr;
  }
  void commit(int, void*) override {}
  void discard(int, void*) override {}
};

TEST(TaskPool, ATaskErrorReachesTheCallerAndThePoolKeepsWorking) {
  TaskPool pool({.num_threads = 3});
  FailingPhase failing;
  try {
    pool.run(failing);
    FAIL() << "expected the task's error";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what == "task 2 failed" || what == "task 4 failed") << what;
  }
  CountingPhase fine(7);
  pool.run(fine);
  for (int t = 0; t < 7; ++t) EXPECT_EQ(fine.commits_[static_cast<size_t>(t)].load(), 1);
  pool.wait_for_runs_before(UINT64_MAX);
}

// Each task multiplies 2^-100 by 2^-30 (2^-130, a subnormal unless flushed) on whichever thread
// runs it.
class SubnormalPhase : public TaskPhase {
 public:
  int num_tasks() const override { return 16; }
  void* run(int task, int) override {
    volatile float a = std::ldexp(1.0f, -100), b = std::ldexp(1.0f, -30);
    products[static_cast<size_t>(task)] = a * b;
    return nullptr;
  }
  void commit(int, void*) override {}
  void discard(int, void*) override {}
  std::vector<float> products = std::vector<float>(16, -1.0f);
};

TEST(TaskPool, TasksRunWithSubnormalsFlushedAndTheCallersModeIsKept) {
  // Where the CPU has no mode Lockstep handles (core.FlushDenormal checks which), tasks keep
  // subnormals like everything else.
  const bool flushes = set_flush_denormal(true);
  volatile float a = std::ldexp(1.0f, -100), b = std::ldexp(1.0f, -30);
  const float subnormal = std::ldexp(1.0f, -130);
  for (int threads : {1, 3}) {
    TaskPool pool({.num_threads = threads});
    SubnormalPhase flushed;
    pool.run(flushed);
    for (float p : flushed.products)
      EXPECT_EQ(p, flushes ? 0.0f : subnormal) << threads << " threads";
    EXPECT_EQ(a * b, subnormal) << "the caller's floating-point mode changed";

    set_flush_denormal(false);
    SubnormalPhase kept;
    pool.run(kept);
    set_flush_denormal(true);
    for (float p : kept.products) EXPECT_EQ(p, subnormal) << threads << " threads, flushing off";
  }
}

// A phase's one task runs on one thread until the other, finding nothing to take, has done all
// three units of the phase's idle work (a minute's bound keeps a failure from hanging: the checks
// below then fail). The idle work runs on the other thread, unit after unit while there is some.
class IdleWorkPhase : public TaskPhase {
 public:
  int num_tasks() const override { return 1; }
  void* run(int, int thread) override {
    std::unique_lock lock(mu_);
    task_thread_ = thread;
    saw_all_ = cv_.wait_for(lock, std::chrono::minutes(1), [&] { return units_ == 0; });
    return nullptr;
  }
  void commit(int, void*) override {}
  void discard(int, void*) override {}
  bool idle_work(int) override {
    std::lock_guard lock(mu_);
    if (units_ == 0) return false;
    --units_;
    idle_threads_.insert(static_cast<int>(os_thread()));
    cv_.notify_all();
    return true;
  }
  static long os_thread() { return syscall(SYS_gettid); }

  std::mutex mu_;
  std::condition_variable cv_;
  int units_ = 3;
  int task_thread_ = -1;
  bool saw_all_ = false;
  std::set<int> idle_threads_;
};

TEST(TaskPool, AThreadWithNothingToTakeDoesThePhasesIdleWork) {
  TaskPool pool({.num_threads = 2,
                 .backup_factor = 1e9,
                 .backup_slack = std::chrono::hours(1),
                 .stall_window = std::chrono::microseconds(0)});
  IdleWorkPhase phase;
  pool.run(phase);
  pool.wait_for_runs_before(UINT64_MAX);
  std::lock_guard lock(phase.mu_);
  EXPECT_TRUE(phase.saw_all_) << "the task waited for the idle work in vain";
  EXPECT_EQ(phase.units_, 0);
  ASSERT_EQ(phase.idle_threads_.size(), 1u) << "one thread idled";
  EXPECT_GE(phase.task_thread_, 0);
}

// Two tasks on two threads, one each: task 1, the helper's, waits until task 0 has started (so
// the caller runs task 0: it claims its own task first), and task 0 runs until the thread done
// with task 1 has done a unit of idle work (a minute's bound on each wait keeps a failure from
// hanging). The idle work is asked to prefer task 0, still running on the other thread — or,
// with idle_work_prefers_own_task on a quiet machine, task 1, the one the idle thread was dealt
// and runs again next time, so that what it prepares lands in its own core's cache.
class PreferredIdleWorkPhase : public TaskPhase {
 public:
  int num_tasks() const override { return 2; }
  void* run(int task, int) override {
    std::unique_lock lock(mu_);
    ran_on_[task] = IdleWorkPhase::os_thread();
    cv_.notify_all();
    if (task == 0) {
      saw_idle_ = cv_.wait_for(lock, std::chrono::minutes(1), [&] { return done_; });
    } else {
      cv_.wait_for(lock, std::chrono::minutes(1), [&] { return ran_on_[0] != -1; });
    }
    return nullptr;
  }
  void commit(int, void*) override {}
  void discard(int, void*) override {}
  bool idle_work(int preferred) override {
    std::lock_guard lock(mu_);
    if (done_) return false;
    done_ = true;
    preferred_ = preferred;
    idle_thread_ = IdleWorkPhase::os_thread();
    cv_.notify_all();
    return true;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false, saw_idle_ = false;
  int preferred_ = -2;
  long idle_thread_ = -1;
  long ran_on_[2] = {-1, -1};
};

TEST(TaskPool, IdleWorkPrefersATaskStillRunningOrTheIdleThreadsOwnWhereChosenAndQuiet) {
  for (bool own : {false, true}) {
    for (bool busy : {false, true}) {
      SCOPED_TRACE(std::string(own ? "own task preferred, " : "") + (busy ? "busy" : "quiet"));
      TaskPool pool({.num_threads = 2,
                     .backup_factor = 1e9,
                     .backup_slack = std::chrono::hours(1),
                     .stall_window = std::chrono::microseconds(0),
                     .idle_work_prefers_own_task = own,
                     .machine_busy = [busy] { return busy; }});
      PreferredIdleWorkPhase phase;
      pool.run(phase);
      pool.wait_for_runs_before(UINT64_MAX);
      std::lock_guard lock(phase.mu_);
      ASSERT_TRUE(phase.saw_idle_) << "task 0 waited for the idle work in vain";
      EXPECT_EQ(phase.idle_thread_, phase.ran_on_[1]) << "the thread done with task 1 idled";
      EXPECT_NE(phase.ran_on_[0], phase.ran_on_[1]);
      EXPECT_EQ(phase.preferred_, own && !busy ? 1 : 0);
    }
  }
}

// A first phase of one task with three units of idle work, chained to a phase of four tasks, run
// by the caller alone, which logs what it does in order. Where chosen, the idle work comes before
// any task of the chained phase; where not, a thread does it only when it finds nothing to take,
// which the caller alone never does before the phase is complete.
class LoggedIdleWorkPhase : public CountingPhase {
 public:
  LoggedIdleWorkPhase(int n, std::vector<std::string>& log) : CountingPhase(n), log_(log) {}
  bool idle_work(int) override {
    if (units_ == 0) return false;
    --units_;
    log_.push_back("idle");
    return true;
  }

 private:
  int units_ = 3;
  std::vector<std::string>& log_;
};

class LoggedPhase : public CountingPhase {
 public:
  LoggedPhase(int n, std::vector<std::string>& log) : CountingPhase(n), log_(log) {}
  void* run(int task, int thread) override {
    log_.push_back("task " + std::to_string(task));
    return CountingPhase::run(task, thread);
  }

 private:
  std::vector<std::string>& log_;
};

TEST(TaskPool, TheFirstPhasesIdleWorkComesBeforeTheChainedPhasesTasksWhereChosen) {
  for (bool before : {false, true}) {
    SCOPED_TRACE(before ? "idle work before the chained phase" : "idle work when idle");
    TaskPool pool({.num_threads = 1, .idle_work_before_chained_phase = before});
    std::vector<std::string> log;
    LoggedIdleWorkPhase first(1, log);
    LoggedPhase second(4, log);
    pool.run(first, second);
    std::vector<std::string> expected = {"task 0", "task 1", "task 2", "task 3"};
    if (before) expected.insert(expected.begin(), 3, "idle");
    EXPECT_EQ(log, expected);
    for (int t = 0; t < 4; ++t) EXPECT_EQ(second.commits_[static_cast<size_t>(t)].load(), 1);
  }
}

TEST(TaskPool, RejectsNoThreads) {
  EXPECT_THROW(TaskPool({.num_threads = 0}), InvalidArgument);
}

// A rank's thread may be narrowed to one CPU by a peer for a while (HostRankPlacement); a pool it
// starts then must not inherit that CPU for good. Its helpers start on the registered mask.
TEST(TaskPool, HelpersStartOnTheRegisteredStartMaskNotOnTheirStartersNarrowedOne) {
  cpu_set_t original;
  CPU_ZERO(&original);
  ASSERT_EQ(sched_getaffinity(0, sizeof original, &original), 0);
  int first_cpu = 0;
  while (!CPU_ISSET(first_cpu, &original)) ++first_cpu;
  cpu_set_t narrowed;
  CPU_ZERO(&narrowed);
  CPU_SET(first_cpu, &narrowed);
  const int owner = 0;
  os::register_thread_start_mask(&owner, original);
  ASSERT_EQ(sched_setaffinity(0, sizeof narrowed, &narrowed), 0);
  cpu_set_t helper_mask;
  CPU_ZERO(&helper_mask);
  {
    TaskPool pool({.num_threads = 2});
    std::mutex mu;
    std::condition_variable cv;
    bool seen = false;
    pool.set_join_hook([&](int thread, uint64_t) {
      std::lock_guard lock(mu);
      if (thread != 1 || seen) return;
      sched_getaffinity(0, sizeof helper_mask, &helper_mask);
      seen = true;
      cv.notify_all();
    });
    CountingPhase phase(4);
    pool.run(phase);
    {
      // The helper joins the phase whether it woke before the caller finished it or after.
      std::unique_lock lock(mu);
      cv.wait_for(lock, std::chrono::minutes(1), [&] { return seen; });
      EXPECT_TRUE(seen);
    }
    pool.wait_for_runs_before(UINT64_MAX);
    pool.set_join_hook({});
  }
  cpu_set_t caller_mask;
  CPU_ZERO(&caller_mask);
  sched_getaffinity(0, sizeof caller_mask, &caller_mask);
  sched_setaffinity(0, sizeof original, &original);
  os::unregister_thread_start_mask(&owner);
  EXPECT_TRUE(CPU_EQUAL(&helper_mask, &original))
      << "the helper runs on " << CPU_COUNT(&helper_mask) << " CPUs, the registered mask has "
      << CPU_COUNT(&original);
  EXPECT_TRUE(CPU_EQUAL(&caller_mask, &narrowed)) << "the caller's own mask is not the pool's";
}

}  // namespace
}  // namespace lockstep::distribute
