#include "step_input.h"

#include <string>

#include "core/futex.h"
#include "lockstep/core/error.h"
#include "lockstep/core/task_cancellation.h"

namespace lockstep::distribute {

StepInput::StepInput(PerReplica<Element> given) : given_(std::move(given.values)) {}

StepInput::StepInput(Pull pull, Stage stage) : pull_(std::move(pull)) {
  if (stage) {
    stager_ = std::make_unique<Stager>();
    stager_->fn = std::move(stage);
  }
}

void StepInput::begin(int num_replicas) {
  if (!pull_ && !given_.empty() && static_cast<int>(given_.size()) != num_replicas) {
    throw InvalidArgument("StepInput: expected an element per local replica (" +
                          std::to_string(num_replicas) + "). Received " +
                          std::to_string(given_.size()) + ".");
  }
  num_replicas_ = num_replicas;
  if (pull_) slots_ = std::make_unique<Slot[]>(static_cast<size_t>(num_replicas));
}

const Element& StepInput::get(int replica) {
  if (slots_) return pull(replica);
  if (pull_) throw Internal("StepInput::get: the step did not begin() its pulled input.");
  static const Element kNone;
  return given_.empty() ? kNone : given_[static_cast<size_t>(replica)];
}

const Element& StepInput::pull(int replica) {
  if (replica < 0 || replica >= num_replicas_) {
    throw InvalidArgument("StepInput::get: local replica " + std::to_string(replica) +
                          " is not in [0, " + std::to_string(num_replicas_) + ").");
  }
  Slot& s = slots_[static_cast<size_t>(replica)];
  std::lock_guard lock(s.mu);
  if (!s.pulled) {
    check_task_cancelled();
    if (s.closed) throw TaskCancelled();
    try {
      s.element = pull_(replica);
    } catch (const TaskCancelled&) {
      throw;
    } catch (...) {
      s.error = std::current_exception();
    }
    s.pulled = true;
  }
  if (s.error) std::rethrow_exception(s.error);
  return s.element;
}

bool StepInput::stage(int replica) {
  if (!stager_) return false;
  // One thread stages at a time; another finds nothing to do here.
  std::unique_lock lock(stager_->mu, std::try_to_lock);
  if (!lock.owns_lock() || !stager_->fn) return false;
  return stager_->fn(replica);
}

void StepInput::close(std::chrono::microseconds spin) {
  if (stager_) {
    std::unique_lock lock(stager_->mu, std::try_to_lock);
    // The mutex is tried every 64 rounds, not at each: its line stays with the staging thread.
    if (!lock.owns_lock() && spin.count() > 0)
      os::spin_until(spin,
                     [&, round = 0]() mutable { return ++round % 64 == 0 && lock.try_lock(); });
    if (!lock.owns_lock()) lock.lock();
    stager_->fn = nullptr;
  }
  if (!slots_) return;
  for (int r = 0; r < num_replicas_; ++r) {
    Slot& s = slots_[static_cast<size_t>(r)];
    std::lock_guard lock(s.mu);
    s.closed = true;
  }
  pull_ = nullptr;
}

}  // namespace lockstep::distribute
