#pragma once
// StepInput: what one replica pulled from its own input pipeline for a step, kept for every run of
// that replica's task in the step. With per-replica pipelines the pull happens inside the task,
// and a task may run twice (a backup run for a straggler): both runs must train on the same
// element — and when the pull failed, both must fail with the same error, never pull the element
// after it (the backup could then commit and the error would be lost with the skipped batch).
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>

#include "lockstep/data/element.h"

namespace lockstep::keras {

class StepInput {
 public:
  // The element of `step`: the first call for a step pulls it with `pull` (after a cancellation
  // check: a run whose twin already committed stops here); later calls for the same step return
  // the same element or rethrow the same error. A pull cancelled (TaskCancelled) is not kept.
  Element get(int64_t step, const std::function<Element()>& pull);

 private:
  std::mutex mu_;
  int64_t step_ = -1;
  Element element_;
  std::exception_ptr error_;
};

}  // namespace lockstep::keras
