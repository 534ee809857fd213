#include "lockstep/autodiff/variable.h"

#include <atomic>
#include <cstring>
#include <mutex>

#include "lockstep/core/bfloat16.h"

#include "lockstep/autodiff/gradient_tape.h"

namespace lockstep {

namespace {
thread_local VariableCreationObserver* current_observer = nullptr;

void check_same(const Tensor& var, const Tensor& value, const std::string& name, const char* op) {
  if (!(var.shape() == value.shape()) || var.dtype() != value.dtype()) {
    throw InvalidArgument(std::string(op) + " on variable '" + name + "': expected " +
                          var.describe() + ". Received: " + value.describe() + ".");
  }
}

template <typename T>
void add_into(const Tensor& dst, const Tensor& src, T sign) {
  T* d = dst.data<T>();
  const T* s = src.data<T>();
  for (int64_t i = 0, n = dst.num_elements(); i < n; ++i) d[i] += sign * s[i];
}

void update(const Tensor& var, const Tensor& delta, double sign) {
  switch (var.dtype()) {
    case DType::float32:
      add_into<float>(var, delta, static_cast<float>(sign));
      break;
    case DType::float64:
      add_into<double>(var, delta, sign);
      break;
    case DType::int32:
      add_into<int32_t>(var, delta, static_cast<int32_t>(sign));
      break;
    case DType::int64:
      add_into<int64_t>(var, delta, static_cast<int64_t>(sign));
      break;
    default: {
      Tensor wide = var.to(DType::float32);
      add_into<float>(wide, delta.to(DType::float32), static_cast<float>(sign));
      var.copy_from(wide.to(var.dtype()));
    }
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
  Tensor value;
  std::string name;
  bool trainable = true;
  const void* owner = nullptr;
  // bfloat16_rounded()'s cache. `rounded_current` is read without the lock on every forward
  // pass; the lock only serialises the (re)computation when several replicas find it stale.
  std::mutex rounded_mu;
  std::atomic<bool> rounded_current{false};
  Tensor rounded;
};

Variable::Variable(Tensor initial_value, std::string name, bool trainable) {
  if (!initial_value.defined()) {
    throw InvalidArgument("Variable '" + name + "': the initial value is an undefined tensor.");
  }
  const void* owner = nullptr;
  if (auto* obs = VariableCreationScope::current()) owner = obs->on_variable_created(name);
  state_ = std::make_shared<State>();
  state_->value = std::move(initial_value);
  state_->name = std::move(name);
  state_->trainable = trainable;
  state_->owner = owner;
}

const Tensor& Variable::raw_value() const {
  if (!state_)
    throw FailedPrecondition("Variable: use of an undefined (default-constructed) variable.");
  return state_->value;
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
  state_->rounded_current.store(false, std::memory_order_release);
  state_->value.copy_from(value);
}
void Variable::assign_add(const Tensor& delta) const {
  check_same(raw_value(), delta, state_->name, "assign_add");
  state_->rounded_current.store(false, std::memory_order_release);
  update(state_->value, delta, 1.0);
}
void Variable::assign_sub(const Tensor& delta) const {
  check_same(raw_value(), delta, state_->name, "assign_sub");
  state_->rounded_current.store(false, std::memory_order_release);
  update(state_->value, delta, -1.0);
}

Tensor Variable::bfloat16_rounded() const {
  const Tensor& v = raw_value();
  if (v.dtype() != DType::float32) {
    throw InvalidArgument(
        "Variable '" + state_->name +
        "'.bfloat16_rounded: expected a float32 variable. Received: " + v.describe() + ".");
  }
  State& s = *state_;
  if (!s.rounded_current.load(std::memory_order_acquire)) {
    std::lock_guard lock(s.rounded_mu);
    if (!s.rounded_current.load(std::memory_order_relaxed)) {
      if (!s.rounded.defined()) s.rounded = Tensor(v.shape(), DType::float32);
      round_to_bfloat16_values(v.data<float>(), s.rounded.data<float>(),
                               static_cast<size_t>(v.num_elements()));
      s.rounded_current.store(true, std::memory_order_release);
    }
  }
  return s.rounded;
}

float* Variable::bfloat16_rounded_data() const {
  raw_value();
  if (!state_->rounded_current.load(std::memory_order_acquire)) return nullptr;
  return state_->rounded.data<float>();
}

}  // namespace lockstep
