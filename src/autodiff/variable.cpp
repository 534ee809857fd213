#include "lockstep/autodiff/variable.h"

#include <atomic>
#include <cstring>
#include <mutex>

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/core/bfloat16.h"
#include "lockstep/ops/elementwise.h"

namespace lockstep {

namespace {
thread_local VariableCreationObserver* current_observer = nullptr;

void check_same(const Tensor& var, const Tensor& value, const std::string& name, const char* op) {
  if (!(var.shape() == value.shape()) || var.dtype() != value.dtype()) {
    throw InvalidArgument(std::string(op) + " on variable '" + name + "': expected " +
                          var.describe() + ". Received: " + value.describe() + ".");
  }
}

}  // namespace

VariableCreationScope::VariableCreationScope(VariableCreationObserver* observer)
    : previous_(current_observer) {
  current_observer = observer;
}
VariableCreationScope::~VariableCreationScope() {
  current_observer = previous_;
}
VariableCreationObserver* VariableCreationScope::current() {
  return current_observer;
}

struct Variable::State {
  // values[current] is the value; values[1 - current] exists after enable_next_buffer().
  Tensor values[2];
  std::atomic<int> current{0};
  std::string name;
  bool trainable = true;
  const void* owner = nullptr;
  // bfloat16_rounded()'s cache, one per buffer. `rounded_current` is read without the lock on
  // every forward pass; the lock only serialises the (re)computation when several replicas find
  // it stale.
  std::mutex rounded_mu;
  std::atomic<bool> rounded_current[2] = {false, false};
  Tensor rounded[2];

  int cur() const { return current.load(std::memory_order_acquire); }
  const Tensor& value() const { return values[cur()]; }
};

Variable::Variable(Tensor initial_value, std::string name, bool trainable) {
  if (!initial_value.defined()) {
    throw InvalidArgument("Variable '" + name + "': the initial value is an undefined tensor.");
  }
  const void* owner = nullptr;
  if (auto* obs = VariableCreationScope::current()) owner = obs->on_variable_created(name);
  state_ = std::make_shared<State>();
  state_->values[0] = std::move(initial_value);
  state_->name = std::move(name);
  state_->trainable = trainable;
  state_->owner = owner;
}

const Tensor& Variable::raw_value() const {
  if (!state_)
    throw FailedPrecondition("Variable: use of an undefined (default-constructed) variable.");
  return state_->value();
}

const Tensor& Variable::value() const {
  const Tensor& v = raw_value();
  if (state_->trainable) autodiff::note_variable_read(v);
  return v;
}

const std::string& Variable::name() const {
  return raw_value(), state_->name;
}
bool Variable::trainable() const {
  return raw_value(), state_->trainable;
}
const void* Variable::owner() const {
  return raw_value(), state_->owner;
}

void Variable::assign(const Tensor& value) const {
  check_same(raw_value(), value, state_->name, "assign");
  state_->rounded_current[state_->cur()].store(false, std::memory_order_release);
  state_->value().copy_from(value);
}
void Variable::assign_add(const Tensor& delta) const {
  check_same(raw_value(), delta, state_->name, "assign_add");
  state_->rounded_current[state_->cur()].store(false, std::memory_order_release);
  ops::add_into(state_->value(), delta);
}
void Variable::assign_sub(const Tensor& delta) const {
  check_same(raw_value(), delta, state_->name, "assign_sub");
  state_->rounded_current[state_->cur()].store(false, std::memory_order_release);
  ops::sub_into(state_->value(), delta);
}

Tensor Variable::bfloat16_rounded() const {
  const Tensor& v = raw_value();
  if (v.dtype() != DType::float32) {
    throw InvalidArgument(
        "Variable '" + state_->name +
        "'.bfloat16_rounded: expected a float32 variable. Received: " + v.describe() + ".");
  }
  State& s = *state_;
  const int c = s.cur();
  if (!s.rounded_current[c].load(std::memory_order_acquire)) {
    std::lock_guard lock(s.rounded_mu);
    if (!s.rounded_current[c].load(std::memory_order_relaxed)) {
      if (!s.rounded[c].defined()) s.rounded[c] = Tensor(v.shape(), DType::float32);
      round_to_bfloat16_values(v.data<float>(), s.rounded[c].data<float>(),
                               static_cast<size_t>(v.num_elements()));
      s.rounded_current[c].store(true, std::memory_order_release);
    }
  }
  return s.rounded[c];
}

float* Variable::bfloat16_rounded_data() const {
  raw_value();
  const int c = state_->cur();
  if (!state_->rounded_current[c].load(std::memory_order_acquire)) return nullptr;
  return state_->rounded[c].data<float>();
}

void Variable::enable_next_buffer() const {
  const Tensor& v = raw_value();
  State& s = *state_;
  const int next = 1 - s.cur();
  if (s.values[next].defined()) return;
  // Same id as the value (a copy of the handle), storage of its own.
  Tensor buffer = v;
  Tensor fresh = v.clone();
  buffer.swap_storage(fresh);
  s.values[next] = std::move(buffer);
}

bool Variable::has_next_buffer() const {
  raw_value();
  return state_->values[1 - state_->cur()].defined();
}

const Tensor& Variable::next_value() const {
  raw_value();
  const Tensor& t = state_->values[1 - state_->cur()];
  if (!t.defined()) {
    throw FailedPrecondition("Variable '" + state_->name +
                             "'.next_value: the variable has no second buffer; call "
                             "enable_next_buffer() first.");
  }
  return t;
}

float* Variable::next_bfloat16_rounded_data() const {
  const Tensor& next = next_value();
  State& s = *state_;
  const int c = s.cur();
  if (!s.rounded_current[c].load(std::memory_order_acquire)) return nullptr;
  std::lock_guard lock(s.rounded_mu);
  if (!s.rounded[1 - c].defined()) s.rounded[1 - c] = Tensor(next.shape(), DType::float32);
  return s.rounded[1 - c].data<float>();
}

void Variable::flip_buffers(bool rounded_written) const {
  next_value();
  State& s = *state_;
  const int next = 1 - s.cur();
  s.rounded_current[next].store(rounded_written && s.rounded[next].defined(),
                                std::memory_order_release);
  s.current.store(next, std::memory_order_release);
}

}  // namespace lockstep
