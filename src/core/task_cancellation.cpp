#include "lockstep/core/task_cancellation.h"

namespace lockstep {

namespace {
thread_local const std::atomic<uint32_t>* current_done = nullptr;
thread_local bool current_fine = false;
}  // namespace

TaskCancellationScope::TaskCancellationScope(const std::atomic<uint32_t>* done, bool fine)
    : previous_(current_done), previous_fine_(current_fine) {
  current_done = done;
  current_fine = fine;
}

TaskCancellationScope::~TaskCancellationScope() {
  current_done = previous_;
  current_fine = previous_fine_;
}

bool task_wants_fine_checks() {
  return current_fine && current_done != nullptr;
}

bool in_cancellable_task() {
  return current_done != nullptr;
}

void check_task_cancelled() {
  const std::atomic<uint32_t>* done = current_done;
  if (done != nullptr && done->load(std::memory_order_relaxed) != 0) throw TaskCancelled();
}

}  // namespace lockstep
