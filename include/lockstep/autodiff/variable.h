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

  // The dtype this variable's gradient arrives in: its own, unless a layer multiplies a bfloat16
  // copy of it (Keras' mixed_bfloat16, where the kernel's gradient is that of the cast, rounded to
  // bfloat16, as TensorFlow and PyTorch's autocast compute it). The layer sets it as it runs, so
  // that a training step can give the gradient a buffer of that dtype; a hint only: a gradient of
  // another dtype is still taken as it is.
  DType gradient_dtype() const;
  void set_gradient_dtype(DType dtype) const;

  // State that a higher layer keeps per variable for as long as the variable lives (keras'
  // mixed-precision policy keeps the variable's bfloat16-rounded copy here, see
  // keras/mixed_precision.h). The variable only holds it and tells it of the writes it sees:
  // assign/assign_add/assign_sub and flip_buffers. Whoever writes through raw_value()'s data
  // pointer (an optimizer) keeps the companion current itself.
  class Companion {
   public:
    virtual ~Companion() = default;
    // Buffer `buffer` (0 or 1, see current_buffer()) was overwritten through assign*.
    virtual void value_assigned(int buffer) = 0;
    // flip_buffers() made buffer `buffer` current.
    virtual void buffers_flipped(int buffer) = 0;
  };
  // The companion, or nullptr before attach_companion().
  Companion* companion() const;
  // Attaches `companion` unless one is attached already; returns the one attached (the first
  // caller's when several race). Safe from several threads at once.
  Companion& attach_companion(std::unique_ptr<Companion> companion) const;
  // Which of the two buffers holds the value (0 until flip_buffers() first runs).
  int current_buffer() const;

  // ---- Double buffering, for an update computed out of place (the replicated training step,
  // src/distribute/step/buffered_update.h). After enable_next_buffer() the variable has a second
  // buffer of its shape: a step writes the next values there while the current ones are still being
  // read, then flip_buffers() makes them current in one atomic store. Both buffers carry the
  // value's tensor id, so tapes see one variable. Reads (value(), raw_value()) always see the
  // current buffer; assign() writes it. Allocates the second buffer (a copy of the value) if there
  // is none. Call while no other thread uses the variable.
  void enable_next_buffer() const;
  // The buffer flip_buffers() makes current; FailedPrecondition without enable_next_buffer().
  const Tensor& next_value() const;
  // Makes the next buffer current (and tells the companion).
  void flip_buffers() const;
  // Exchanges the next buffer's storage with `spare`'s (same shape and dtype): publishes a next
  // value assembled in `spare` while a late writer may still hold the old next storage, which
  // `spare` then refers to. FailedPrecondition without enable_next_buffer().
  void swap_next_storage(Tensor& spare) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace lockstep
