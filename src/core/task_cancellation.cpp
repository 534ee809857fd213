#include "lockstep/core/task_cancellation.h"

namespace lockstep {

namespace {
thread_local const std::atomic<uint32_t>* current_done = nullptr;
}

TaskCancellationScope::TaskCancellationScope(const std::atomic<uint32_t>* done)
    : previous_(current_done) {
  current_done = done;
}

TaskCancellationScope::~TaskCancellationScope() {
  current_done = previous_;
}

void check_task_cancelled() {
  const std::atomic<uint32_t>* done = current_done;
  if (done != nullptr && done->load(std::memory_order_relaxed) != 0) throw TaskCancelled();
}

}  // namespace lockstep
