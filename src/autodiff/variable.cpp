#include "lockstep/autodiff/variable.h"

#include <atomic>
#include <cstring>
#include <mutex>

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/core/check.h"
#include "lockstep/ops/elementwise.h"

namespace lockstep {

namespace {
thread_local VariableCreationObserver* current_observer = nullptr;

void check_same(const Tensor& var, const Tensor& value, const std::string& name, const char* op) {
  LOCKSTEP_CHECK(var.shape() == value.shape() && var.dtype() == value.dtype(), op, " on variable '",
                 name, "': expected ", var.describe(), ". Received: ", value.describe(), ".");
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
  std::atomic<DType> gradient_dtype{DType::float32};
  std::atomic<Companion*> companion{nullptr};
  std::unique_ptr<Companion> owned_companion;  // set once, with `companion`
  std::mutex companion_mu;

  void assigned() {
    if (Companion* c = companion.load(std::memory_order_acquire)) c->value_assigned(cur());
  }

  int cur() const { return current.load(std::memory_order_acquire); }
  const Tensor& value() const { return values[cur()]; }
};

Variable::Variable(Tensor initial_value, std::string name, bool trainable) {
  LOCKSTEP_CHECK(initial_value.defined(), "Variable '", name,
                 "': the initial value is an undefined tensor.");
  const void* owner = nullptr;
  if (auto* obs = VariableCreationScope::current()) owner = obs->on_variable_created(name);
  state_ = std::make_shared<State>();
  state_->values[0] = std::move(initial_value);
  state_->name = std::move(name);
  state_->trainable = trainable;
  state_->owner = owner;
}

const Tensor& Variable::raw_value() const {
  LOCKSTEP_CHECK_AS(FailedPrecondition, state_,
                    "Variable: use of an undefined (default-constructed) variable.");
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

DType Variable::gradient_dtype() const {
  return raw_value(), state_->gradient_dtype.load(std::memory_order_relaxed);
}

void Variable::set_gradient_dtype(DType dtype) const {
  raw_value();
  state_->gradient_dtype.store(dtype, std::memory_order_relaxed);
}

void Variable::assign(const Tensor& value) const {
  check_same(raw_value(), value, state_->name, "assign");
  state_->assigned();
  state_->value().copy_from(value);
}
void Variable::assign_add(const Tensor& delta) const {
  check_same(raw_value(), delta, state_->name, "assign_add");
  state_->assigned();
  ops::add_into(state_->value(), delta);
}
void Variable::assign_sub(const Tensor& delta) const {
  check_same(raw_value(), delta, state_->name, "assign_sub");
  state_->assigned();
  ops::sub_into(state_->value(), delta);
}

Variable::Companion* Variable::companion() const {
  raw_value();
  return state_->companion.load(std::memory_order_acquire);
}

Variable::Companion& Variable::attach_companion(std::unique_ptr<Companion> companion) const {
  raw_value();
  LOCKSTEP_CHECK(companion != nullptr, "Variable '", state_->name,
                 "'.attach_companion: expected a companion. Received: nullptr.");
  State& s = *state_;
  std::lock_guard lock(s.companion_mu);
  if (Companion* c = s.companion.load(std::memory_order_acquire)) return *c;
  s.owned_companion = std::move(companion);
  s.companion.store(s.owned_companion.get(), std::memory_order_release);
  return *s.owned_companion;
}

int Variable::current_buffer() const {
  raw_value();
  return state_->cur();
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

const Tensor& Variable::next_value() const {
  raw_value();
  const Tensor& t = state_->values[1 - state_->cur()];
  LOCKSTEP_CHECK_AS(FailedPrecondition, t.defined(), "Variable '", state_->name,
                    "'.next_value: the variable has no second buffer; call enable_next_buffer() "
                    "first.");
  return t;
}

void Variable::swap_next_storage(Tensor& spare) const {
  next_value();
  State& s = *state_;
  s.values[1 - s.cur()].swap_storage(spare);
}

void Variable::flip_buffers() const {
  next_value();
  State& s = *state_;
  const int next = 1 - s.cur();
  // The companion first: a reader that sees the new buffer must not find the companion's state
  // for it stale-but-marked-current from two flips ago.
  if (Companion* c = s.companion.load(std::memory_order_acquire)) c->buffers_flipped(next);
  s.current.store(next, std::memory_order_release);
}

}  // namespace lockstep
