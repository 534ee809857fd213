#pragma once
// Variable: a named, mutable tensor that persists across steps (weights, optimizer slots,
// metric accumulators), like tf.Variable.
//
// A Variable is a handle: copies refer to the same variable. Its value tensor is updated in place
// by assign/assign_add/assign_sub, so the value's tensor id stays stable and a gradient tape can
// refer to the variable through it. Reading a trainable variable while a tape is recording on this
// thread makes the tape watch it (as TensorFlow's tapes watch accessed trainable variables).
#include <memory>
#include <string>

#include "lockstep/core/tensor.h"

namespace lockstep {

// Hook for whoever owns variable placement (a distribution strategy's scope): told about every
// variable created on this thread while installed. Lives here because variables are created
// below the distribute layer; the strategy installs itself from above.
class VariableCreationObserver {
 public:
  virtual ~VariableCreationObserver() = default;
  // Returns an owner token recorded in the variable (the strategy it belongs to); may throw to
  // refuse the creation.
  virtual const void* on_variable_created(const std::string& name) = 0;
};

// Installs `observer` for variables created on this thread until destroyed (stack discipline).
class VariableCreationScope {
 public:
  explicit VariableCreationScope(VariableCreationObserver* observer);
  ~VariableCreationScope();
  VariableCreationScope(const VariableCreationScope&) = delete;
  VariableCreationScope& operator=(const VariableCreationScope&) = delete;
  static VariableCreationObserver* current();

 private:
  VariableCreationObserver* previous_;
};

class Variable {
 public:
  Variable() = default;
  // Takes `initial_value` by handle (no copy): the caller should not keep writing through it.
  explicit Variable(Tensor initial_value, std::string name = "variable", bool trainable = true);

  bool defined() const { return state_ != nullptr; }
  // The current value. Records a read on recording tapes (see above).
  const Tensor& value() const;
  // The value without notifying tapes (for optimizers and serialization).
  const Tensor& raw_value() const;
  const std::string& name() const;
  bool trainable() const;
  DType dtype() const { return raw_value().dtype(); }
  const Shape& shape() const { return raw_value().shape(); }
  int64_t num_elements() const { return raw_value().num_elements(); }
  // The strategy (or other owner) whose scope created this variable; nullptr when none.
  const void* owner() const;

  // In-place updates; shapes and dtypes must match the variable's.
  void assign(const Tensor& value) const;
  void assign_add(const Tensor& delta) const;
  void assign_sub(const Tensor& delta) const;

  bool same_as(const Variable& other) const { return state_ == other.state_; }

  // The value rounded to bfloat16 values kept in float32 (round_to_bfloat16_values): the weights
  // a mixed_bfloat16 layer multiplies by where bfloat16 matmuls compute in float32. A float32
  // variable only. Cached: computed on first use and after any write that did not keep it current
  // (assign, assign_add, assign_sub); optimizers keep it current as they update the value (see
  // bfloat16_rounded_data), which saves a full pass over every kernel per step. Safe to call from
  // several threads at once (the replicas of a step). The handle shares the cache's storage: it
  // changes when the variable does, like the value. Writing through the value's data pointer
  // bypasses the cache: use assign.
  Tensor bfloat16_rounded() const;
  // For code that updates the value in place through raw_value()'s data (optimizers): the cached
  // rounded copy's data when it is current, else nullptr. Whoever writes element i of the value
  // must then write round(value[i]) to element i of this copy before the next read; with nullptr
  // there is nothing to do (the next bfloat16_rounded() recomputes it).
  float* bfloat16_rounded_data() const;

  // ---- Double buffering, for an update computed out of place (the replicated training step,
  // distribute/replicated_step.h). After enable_next_buffer() the variable has a second buffer of
  // its shape: a step writes the next values there while the current ones are still being read,
  // then flip_buffers() makes them current in one atomic store. Both buffers carry the value's
  // tensor id, so tapes see one variable. Reads (value(), raw_value()) always see the current
  // buffer; assign() writes it.
  // Allocates the second buffer (a copy of the value) if there is none. Call while no other
  // thread uses the variable.
  void enable_next_buffer() const;
  bool has_next_buffer() const;
  // The buffer flip_buffers() makes current; FailedPrecondition without enable_next_buffer().
  const Tensor& next_value() const;
  // Where the next buffer's bfloat16-rounded copy goes (see bfloat16_rounded) when the cache is in
  // use for the current buffer, else nullptr. Whoever writes next_value() must then write its
  // rounding here before flip_buffers(true).
  float* next_bfloat16_rounded_data() const;
  // Makes the next buffer current. `rounded_written`: the caller wrote next_bfloat16_rounded_data()
  // in full, so the cache stays current; otherwise it is recomputed on next use.
  void flip_buffers(bool rounded_written) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace lockstep
