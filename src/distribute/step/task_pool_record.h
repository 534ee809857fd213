#pragma once
// TaskPool's shared state, between its two sources: task_pool.cpp (phases, tasks, backups) and
// task_pool_threads.cpp (the helper threads, where they sleep and how busy the machine is).
#include <time.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "distribute/step/task_pool.h"

namespace lockstep::distribute {

namespace task_pool_detail {

using Clock = std::chrono::steady_clock;
// Phases whose records are kept: run() reuses a record only once no thread works on its old
// phase, and a thread descheduled there (beside a busy process, for a scheduler slice of a few
// milliseconds) would hold the caller; 64 phases are a few steps' worth of milliseconds.
constexpr size_t kRing = 64;

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

constexpr int kNoClock = -1;

// CPU time consumed so far by the thread whose clock is `clock`, or -1 if it cannot be read.
inline int64_t cpu_ns(int clock) {
  if (clock == kNoClock) return -1;
  timespec ts{};
  if (clock_gettime(static_cast<clockid_t>(clock), &ts) != 0) return -1;
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

}  // namespace task_pool_detail

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
  // Each phase's TaskPhase::allows_backups(), asked as it opens (the second after the first's
  // phase_done()): threads looking for a task to back up read it here, never from the phase, which
  // may be gone by then.
  std::atomic<bool> allows_backups[2] = {true, true};
  int threads = 1;  // threads taking part (TaskPool::phase_threads_ when announced)
  std::unique_ptr<TaskState[]> tasks;
  int capacity = 0;
  // Tasks are dealt out in one contiguous range per thread, each with its own cursor, and a thread
  // that finishes its range takes from the others'. So when no thread is slow, task i runs on the
  // same thread every step and finds in that core's cache what its previous run left there (the
  // update's block of weights and slots); a thread that is slow just loses tasks to the others.
  // A thread's own range of a phase's tasks, [front, back) still to claim, in one word: the
  // owner claims from the front, another thread from the back, each with one compare-and-swap.
  struct alignas(64) Cursor {
    std::atomic<uint64_t> range{0};
    // The first task of the range as dealt (-1: an empty range), what the owner ran first.
    std::atomic<int> dealt_front{-1};

    void reset(int front, int back) {
      range.store(pack(front, back), std::memory_order_relaxed);
      dealt_front.store(front < back ? front : -1, std::memory_order_relaxed);
    }
    // The claimed task, or -1 when the range is empty.
    int claim(bool from_back) {
      uint64_t r = range.load(std::memory_order_relaxed);
      for (;;) {
        const int front = static_cast<int>(r >> 32), back = static_cast<int>(r & 0xffffffffu);
        if (front >= back) return -1;
        const uint64_t taken = from_back ? pack(front, back - 1) : pack(front + 1, back);
        if (range.compare_exchange_weak(r, taken, std::memory_order_acq_rel,
                                        std::memory_order_relaxed)) {
          return from_back ? back - 1 : front;
        }
      }
    }

   private:
    static uint64_t pack(int front, int back) {
      return uint64_t{static_cast<uint32_t>(front)} << 32 | static_cast<uint32_t>(back);
    }
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
  bool allows_backup(int task) const {
    return allows_backups[task < split ? 0 : 1].load(std::memory_order_relaxed);
  }

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
  // A run (or idle work) counted in `executing` for its lifetime.
  struct Executing {
    Record& rec;
    explicit Executing(Record& r) : rec(r) {
      rec.executing.fetch_add(1, std::memory_order_seq_cst);
    }
    ~Executing() { rec.stop_executing(); }
    Executing(const Executing&) = delete;
    Executing& operator=(const Executing&) = delete;
  };
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

}  // namespace lockstep::distribute
