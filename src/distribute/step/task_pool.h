#pragma once
// TaskPool: the threads that run a training step, as tasks rather than as one thread per replica.
// Internal to the library (the step engine, the profiler and in-tree tests use it), with its test
// hooks (set_run_hook, set_join_hook, TaskPoolOptions::machine_busy).
//
// A step is a sequence of phases (every replica's forward and backward; then the sum of the
// gradients and the optimizer update, block by block). Each phase is a set of independent tasks
// that the pool's threads — and the thread that calls run() — take dynamically, so a thread that
// is slow or descheduled (a shared core, a busy host program) simply takes fewer tasks. Each
// thread first takes from a contiguous range of the phase's tasks of its own, then from the
// others' (from the far end of theirs): with no straggler, task i runs on the same thread step
// after step and finds in that core's cache what it left there the step before. The ranges are
// cut by the tasks' costs (TaskPhase::task_cost), so that a thread seldom needs another's tasks;
// when it does, it takes the ones their owner would reach last, the same ones from step to step.
//
// Backup tasks. When no task is left to take but one is still held by another thread past a
// deadline (backup_factor x the typical run time of the phase's tasks, plus backup_slack), an idle
// thread runs it again — a backup, as MapReduce does for stragglers. It does not wait for the
// deadline when the holder is descheduled: an idle thread samples the holder's CPU clock, and a
// holder that got less than a quarter of a core over the last stall_window (the OS gave its core
// to another process, or it blocks) is backed up at once. Both runs compute the same
// bits into state private to the run; the first to finish commits its result, the other's is
// discarded (it stops early at its next check_task_cancelled()). A phase is done when every task
// has committed, whatever the losing runs are still doing: they never write shared state, and
// TaskPhase objects and the buffers they read must outlive them (wait_for_runs_before()).
//
// Waiting never spins on a busy machine: idle threads sleep on a futex (with a timeout when a
// backup deadline is pending). Only when the machine has a spare core do they spin briefly before
// sleeping — between phases and while waiting for a phase's last task — which saves a futex
// wake-up (tens of microseconds on a VM) several times per step. One exception, the caller on a
// busy machine: it does not sleep while a task is held on another CPU but backs it up at once.
// Only the caller starts the next phase, and a caller asleep lost its CPU to the other process,
// which the kernel often gave back a scheduler slice (milliseconds) after the wake-up. Its backup
// is work toward the phase's end — cancelled when the holder commits, the winner when the holder
// was descheduled — and it fills time its CPU would otherwise idle in.
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "distribute/step/load_streaks.h"
#include "lockstep/core/profiler.h"

namespace lockstep::distribute {

// One phase: `num_tasks()` independent tasks. run(task, thread) computes task `task` into state
// private to this run (thread is the index of the running thread in [0, num_threads)) and
// returns it; the first run of each task to return gets commit(task, result) (called once, on the
// thread that ran it), every later one discard(task, result). A run that throws TaskCancelled
// has neither called and must release what it took. Any other exception fails the phase: the
// other runs are cancelled and run() rethrows the exception of the lowest failing task.
class TaskPhase {
 public:
  virtual ~TaskPhase() = default;
  virtual int num_tasks() const = 0;
  virtual void* run(int task, int thread) = 0;
  virtual void commit(int task, void* result) = 0;
  virtual void discard(int task, void* result) = 0;
  // Phases of one kind share the running estimate of a task's run time that sets the backup
  // deadline (kinds 0 .. kMaxKinds - 1).
  virtual int kind() const { return 0; }
  // What task `task` costs relative to the phase's others (at least 1): each thread's own range
  // of tasks is cut to be about as costly as the others'.
  virtual int64_t task_cost(int /*task*/) const { return 1; }
  // What a run of a task records when the profiler is on (lockstep/core/profiler.h): its phase
  // (Phase::none: nothing) and the local replica it works for (-1: none). The span covers the run
  // and its commit or discard.
  virtual profiler::Phase trace_phase() const { return profiler::Phase::none; }
  virtual int trace_replica(int /*task*/) const { return -1; }
  // A phase chained to the next (TaskPool::run(first, then)) ends here: called once, on the
  // thread whose commit completed the last of its tasks, before any task of the next phase
  // starts. An exception fails both.
  virtual void phase_done() {}
  // Work that belongs to no task, for a thread that finds nothing to take while the phase (or the
  // one chained after it) is still running, or before it takes the chained phase's tasks
  // (TaskPoolOptions::idle_work_before_chained_phase): one unit of it, and whether there was any
  // (false: nothing to do now). `preferred`: a task of this phase not done yet (-1: none), or, on a
  // quiet machine with TaskPoolOptions::idle_work_prefers_own_task, the task the idle thread was
  // dealt first (it runs that task again next time). It may not change what any task computes (a
  // replica phase stages the input of later steps). It runs counted as a task run
  // (wait_for_runs_before waits for it).
  virtual bool idle_work(int /*preferred*/) { return false; }
  // Whether an idle thread may run a task of this phase again while its first run is under way (a
  // backup). A phase whose tasks write what they read says no: a second run would read what the
  // first had already written. Its straggler holds the phase until it finishes. Asked once, as the
  // phase opens (a chained second phase: after the first's phase_done()).
  virtual bool allows_backups() const { return true; }
};

struct TaskPoolOptions {
  // Threads that run tasks, counting the thread that calls run().
  int num_threads = 1;
  // Optional OS cpu ids per thread (index 0 is the caller, never pinned). Empty: not pinned,
  // which is the default: a pinned thread whose core is shared cannot move to an idle one.
  std::vector<std::vector<int>> pin_cores;
  // A task still running after backup_factor x its kind's typical run time + backup_slack gets a
  // backup run on an idle thread.
  double backup_factor = 2.0;
  std::chrono::microseconds backup_slack{100};
  // Spin this long before sleeping, when the machine has a spare core (see the top).
  std::chrono::microseconds spin{300};
  // A held task whose holder used less than a quarter of this much CPU time over this much wall
  // time gets its backup before the deadline (see the top); zero turns the check off.
  std::chrono::microseconds stall_window{50};
  // Threads beyond num_threads that take tasks only while another process is runnable on the
  // machine (sampled with the spinning decision, every 20 ms). A busy machine's scheduler shares
  // its cores per runnable thread, so one more thread gets the job a larger share (beside one busy
  // process on two cores: 3/4 instead of 2/3), and a descheduled thread's task finds another to
  // back it up; on a quiet machine they sleep, since there they would only take cores from the
  // others. Their thread indices are num_threads .. num_threads + busy_extra_threads - 1.
  int busy_extra_threads = 0;
  // On a busy machine the caller backs up at once a task held on another CPU rather than sleep
  // (see the top). Off for a worker that shares its host with other workers of the job: there
  // the busy process is mostly the job itself, whose other ranks the duplicate work would slow.
  bool eager_caller_backups = true;
  // Whether idle work (TaskPhase::idle_work) on a quiet machine prefers the task the idle thread
  // was dealt, so that what it prepares lands in its own core's cache, rather than a task still
  // running. Unset: on AMD's CPUs, whose cores read another core's lines at a higher cost (as in
  // BufferedUpdate::stream_shared_reads). On a busy machine it prefers a task still running,
  // whose holder may be descheduled and hold the phase up.
  std::optional<bool> idle_work_prefers_own_task;
  // Whether a thread takes the first phase's idle work before the tasks of the phase chained after
  // it (run(first, then)) once that one is open, rather than only when no task is left. A replica
  // phase's idle work stages the next step's input, a unit several times an update chunk's length:
  // taken first, it leaves the step to end on short chunks both threads share, instead of on one
  // thread's staging while the other waits. Unset: on Intel's CPUs, where it measured a gain; on
  // AMD's it measured none (docs/performance.md, "Measured design choices").
  std::optional<bool> idle_work_before_chained_phase;
  // Test hook: when set, decides whether another process is runnable instead of /proc/stat, and
  // is asked at every run().
  std::function<bool()> machine_busy;
};

struct TaskPoolStats {
  uint64_t phases = 0;
  uint64_t runs = 0;         // task runs started, backups included
  uint64_t backups = 0;      // backup runs started
  uint64_t backup_wins = 0;  // tasks committed by their backup run
  uint64_t cancelled = 0;    // runs that stopped early at check_task_cancelled()
  uint64_t placements = 0;   // helpers woken off the caller's CPU (see TaskPool::run)
  // Backups the caller claimed at once, on a busy machine, of a task held on another CPU (see
  // the top). Each is in `backups` too, unless its task was done before it began.
  uint64_t eager_backups = 0;
  // Helpers brought onto the caller's CPU, on a busy machine, to finish a run of an earlier phase
  // that the caller waits for (wait_for_runs_before).
  uint64_t pulls = 0;
};

class TaskPool {
 public:
  static constexpr int kMaxKinds = 4;

  explicit TaskPool(TaskPoolOptions options);
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  int num_threads() const { return options_.num_threads; }
  // Threads that may run tasks: num_threads() and the busy-machine extras (TaskPhase::run's
  // `thread` is below this).
  int total_threads() const { return options_.num_threads + options_.busy_extra_threads; }
  bool eager_caller_backups() const { return options_.eager_caller_backups; }
  // How long a wait of the caller's may spin before it sleeps: TaskPoolOptions::spin while the
  // machine has a spare core (as of the last run()), else zero — the pool's own waits' policy.
  std::chrono::microseconds spin_before_sleep() const {
    return spin_ok_.load(std::memory_order_relaxed) ? options_.spin : std::chrono::microseconds(0);
  }

  // Runs every task of `phase` and returns once each has committed; returns the phase's sequence
  // number (1, 2, ...). Runs that lost may still be executing afterwards. Not reentrant: one
  // caller thread at a time.
  uint64_t run(TaskPhase& phase);
  // Two phases chained, numbered as one: the tasks of `first`, then — once each has committed and
  // first.phase_done() has returned — those of `then`. The same as run(first), then run(then),
  // without what lies between two phases: a thread that finishes the first phase goes on to the
  // second instead of sleeping until the caller announces it (on a busy machine a helper asleep
  // even briefly may wait a scheduler slice for its CPU), and the helpers are woken once.
  uint64_t run(TaskPhase& first, TaskPhase& then);

  // Blocks until no run of a phase numbered below `sequence` is executing (spinning first for up
  // to TaskPoolOptions::spin while the machine has a spare core; on a busy machine a helper still
  // in such a phase is first brought onto the caller's CPU, pull_late_runners):
  // call it before overwriting anything such a run may still read. A thread that has joined such
  // a phase but is not running a task (looking for one, or descheduled on its way) is not waited
  // for: a run that starts once its task is done returns at once, reading nothing.
  void wait_for_runs_before(uint64_t sequence);

  // Test hook, called at the start of every run before any of its work, on the running thread:
  // hook(kind, task, thread, is_backup, phase), `phase` being the sequence number run() returns
  // for the task's phase. A hook may block (e.g. to stall one thread at a chosen task and show
  // that the phase completes through the backup); it must not call run(). A thread can reach the
  // hook late — after its task's phase was completed by a backup and later phases began — so a
  // hook that stalls "from step k on" must compare `phase`, not the step the caller is in.
  using RunHook = std::function<void(int kind, int task, int thread, bool backup, uint64_t phase)>;
  void set_run_hook(RunHook hook);
  // Test hook, called on a helper thread when it has joined phase `phase` and before it looks for
  // a task — where a thread the OS deschedules holds nobody. May block; must not call run().
  using JoinHook = std::function<void(int thread, uint64_t phase)>;
  void set_join_hook(JoinHook hook);

  // Wakes the threads waiting in the phase under way to look for work again: a task posted
  // blocks they may help with (src/core/shared_blocks.h, TaskPhase::idle_work).
  void wake_idle();

  TaskPoolStats stats() const;
  // Whether any task of the phase that ended last (of two chained phases, the first, from its
  // phase_done() on) was claimed by a second run: such a run, unless it found its task done at
  // once, may still be reading what the phase's tasks read (it stops at its next
  // check_task_cancelled()). False: every task ran once, and nothing of the phase is running.
  bool last_phase_backed_up() const { return backed_up_.load(std::memory_order_seq_cst); }
  // Helper threads asleep between phases, waiting for the next one (for tests).
  int asleep_helpers() const;

  // True while the calling thread executes a backup run (inside TaskPhase::run). A phase may let a
  // task's first run write its result straight to a shared destination and give backups private
  // state, so that the common case — no backup — copies nothing.
  static bool in_backup_run();
  // True on a helper thread of some pool (its own threads, the busy-machine extras included; not
  // the caller of run()): what a phase's idle work, such as staging a replica's next input, runs
  // on besides the tasks.
  static bool on_helper_thread();

 private:
  struct TaskState;
  struct Record;
  uint64_t run_phases(TaskPhase& first, TaskPhase* then);
  void helper(int thread);
  // Takes and runs tasks of `rec` until none is left to take or back up (returns false when the
  // phase is complete, true when this thread should wait for deadlines or completion; `wake_ns`
  // is then the steady-clock time at which a backup may become due).
  bool work_on(Record& rec, int thread, int64_t& wake_ns);
  bool idle_work(Record& rec, int thread);
  // Whether a second run claimed any of tasks [begin, end) of `rec`.
  static bool any_backed_up(const Record& rec, int begin, int end);
  void execute(Record& rec, int task, int thread, bool backup);
  void wait_for_progress(Record& rec, int thread, int64_t wake_ns);
  // Whether the holder of `task` has been descheduled: see stall_window. May set `wake_ns` earlier,
  // to when it can tell.
  bool holder_descheduled(TaskState& task, int64_t now, int64_t& wake_ns);
  // How long a task of `kind` may run before an idle thread backs it up.
  int64_t backup_threshold_ns(int kind) const;
  // The calling thread's CPU clock, for holder_descheduled (thread: its index in the pool).
  void register_cpu_clock(int thread);
  bool spinning_allowed();
  // On a busy machine, before waking the helpers for a phase: a helper asleep on the caller's CPU
  // gets that CPU taken out of its affinity, so it wakes beside the caller, not behind it (the
  // kernel wakes a thread where its waker runs, and threads in lockstep look to its balancer like
  // one task, so beside a busy process it packed them on one CPU). The helper puts its own mask
  // back once awake. Unpinned helpers only.
  void place_sleepers_off(int cpu);
  // Whether `thread` is pinned by TaskPoolOptions::pin_cores (then never moved).
  bool pinned(int thread) const;
  // On a busy machine, when the caller must wait for runs of phases before `sequence`: a helper
  // still in such a phase — usually a run that lost to the caller's backup, descheduled inside a
  // kernel behind the busy process — gets its affinity narrowed to `cpu`, the caller's, which the
  // caller then yields to it. Left alone, it waited for its CPU until the kernel's balancer moved
  // it (at the busy CPU's next tick) or the busy process's slice ended, 1–4 ms, and the next step
  // with it. The helper puts its own mask back when it leaves the phase. Unpinned helpers only;
  // returns how many were moved.
  int pull_late_runners(uint64_t sequence, int cpu);
  // On a helper: puts back the mask it started with if another thread narrowed it
  // (place_sleepers_off, pull_late_runners).
  void restore_mask(int thread);

  TaskPoolOptions options_;
  bool idle_work_prefers_own_task_ = false;      // the option, resolved
  bool idle_work_before_chained_phase_ = false;  // the option, resolved
  std::vector<std::thread> threads_;
  std::vector<std::unique_ptr<Record>> ring_;
  std::atomic<uint32_t> announced_{0};  // futex word: low bits of the latest phase's sequence
  std::atomic<uint64_t> current_{0};    // sequence of the phase being run (0: none yet)
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> typical_ns_[kMaxKinds];
  std::atomic<bool> spin_ok_{false};
  std::chrono::steady_clock::time_point spin_checked_{};
  std::atomic<int> awake_{0};   // pool threads not asleep on the announced_ futex
  std::atomic<int> parked_{0};  // busy-machine extras asleep on standby_ (counted in awake_)
  // Threads that take part in the phases announced from now on: num_threads, or total_threads()
  // while the machine is busy. Extras beyond it sleep on `standby_` (a futex word bumped when it
  // changes).
  std::atomic<int> phase_threads_{1};
  std::atomic<uint32_t> standby_{0};
  LoadStreaks load_;  // the caller's samples: see spinning_allowed()
  // Per thread index: its CPU clock (clockid_t), or kNoClock; the caller's is set by each run().
  std::unique_ptr<std::atomic<int>[]> cpu_clocks_;
  // Per helper: where it sleeps between phases (see place_sleepers_off).
  struct Seat {
    std::atomic<int> tid{0}, cpu{-1}, asleep{0}, moved{0};
    std::atomic<uint64_t> phase{0};  // the phase it is in (0: between phases)
    cpu_set_t mask;                  // its affinity when it started
  };
  std::unique_ptr<Seat[]> seats_;
  std::atomic<bool> placing_{false};  // the machine is busy (set with phase_threads_)
  RunHook hook_;
  JoinHook join_hook_;
  std::mutex hook_mu_;
  std::atomic<bool> has_hook_{false}, has_join_hook_{false};
  uint64_t sequence_ = 0;               // the caller's count of phases run
  std::atomic<bool> backed_up_{false};  // see last_phase_backed_up()
  mutable std::atomic<uint64_t> runs_{0}, backups_{0}, backup_wins_{0}, cancelled_{0},
      placements_{0}, eager_backups_{0}, pulls_{0};
};

}  // namespace lockstep::distribute
