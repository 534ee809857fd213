#pragma once
// Cooperative cancellation of redundant work. The training step runs each task (a replica's
// forward and backward, a block of the update) on whichever thread is free, and re-runs a task
// whose thread is slow or descheduled on an idle one; the first run to finish wins. The other
// run's result is no longer needed: long computations call check_task_cancelled() at safe points
// (between layers, between the backward pass's ops) so that it stops early by throwing
// TaskCancelled, which the task runner catches. Outside such a task nothing happens.
#include <atomic>
#include <cstdint>
#include <exception>

namespace lockstep {

// Thrown by check_task_cancelled(); never escapes the task runner. Not an Error: it is not a
// failure, and `catch (const Error&)` in user code must not swallow it.
class TaskCancelled : public std::exception {
 public:
  const char* what() const noexcept override { return "task cancelled: another run finished it"; }
};

// While alive on this thread, check_task_cancelled() throws once `*done` is nonzero. `fine`: the
// run is likely to lose (a backup of a run already under way), so long kernels that can stop at
// more points without changing a bit should (task_wants_fine_checks()).
class TaskCancellationScope {
 public:
  explicit TaskCancellationScope(const std::atomic<uint32_t>* done, bool fine = false);
  ~TaskCancellationScope();
  TaskCancellationScope(const TaskCancellationScope&) = delete;
  TaskCancellationScope& operator=(const TaskCancellationScope&) = delete;

 private:
  const std::atomic<uint32_t>* previous_;
  bool previous_fine_;
};

// Throws TaskCancelled when the task this thread runs has been finished by another run.
void check_task_cancelled();

// Whether the task this thread runs asked for more safe points (TaskCancellationScope's `fine`).
bool task_wants_fine_checks();

// Whether this thread runs a task that another run may duplicate (a TaskCancellationScope is
// alive): work a backup run of it would need can be prepared here, off the backup's path.
bool in_cancellable_task();

}  // namespace lockstep
