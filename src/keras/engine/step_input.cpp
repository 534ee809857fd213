#include "step_input.h"

#include "lockstep/core/task_cancellation.h"

namespace lockstep::keras {

Element StepInput::get(int64_t step, const std::function<Element()>& pull) {
  std::lock_guard lock(mu_);
  if (step_ != step) {
    check_task_cancelled();
    error_ = nullptr;
    try {
      element_ = pull();
    } catch (const TaskCancelled&) {
      throw;
    } catch (...) {
      error_ = std::current_exception();
    }
    step_ = step;
  }
  if (error_) std::rethrow_exception(error_);
  return element_;
}

}  // namespace lockstep::keras
