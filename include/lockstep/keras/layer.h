#pragma once
// Layer: the Keras layer contract.
//   * the constructor stores configuration only;
//   * build(input_shape) creates the weights, on the first call (input shapes include the batch
//     dimension; in symbolic (functional) calls the batch dimension is 0, printed as None);
//   * call(inputs, training) computes, with differentiable ops (a GradientTape sees them);
//   * compute_output_shape, get_config, trainable_weights / non_trainable_weights.
// Names are unique in the process, per class: "dense", "dense_1", ... (as Keras names them), unless
// given. Weights are named "<layer>/<weight>" ("dense/kernel"), the paths used in weight files.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "lockstep/autodiff/variable.h"
#include "lockstep/core/tensor.h"
#include "lockstep/keras/initializers.h"
#include "lockstep/keras/mixed_precision.h"

namespace lockstep::keras {

class KerasTensor;

namespace detail {
// The nesting of layer calls on this thread: whether a call is the outermost (a model called by
// its trainer, a layer called on its own) and whether its call() declared a float32 output
// (Layer::keep_float32_output). Models open one around their layers' calls too, so a model's
// call() invoked directly still makes its layers inner calls.
class LayerCallScope {
 public:
  LayerCallScope()
      : outer_float32_output_(state().float32_output),
        outermost_(state().depth == 0),
        output_read_rounded_(std::exchange(state().next_read_rounded, false)),
        outer_read_transposed_(std::exchange(state().current_read_transposed,
                                             std::exchange(state().next_read_transposed, false))) {
    ++state().depth;
    state().float32_output = false;
  }
  ~LayerCallScope() {
    --state().depth;
    state().float32_output = outer_float32_output_;
    state().current_read_transposed = outer_read_transposed_;
  }
  LayerCallScope(const LayerCallScope&) = delete;
  LayerCallScope& operator=(const LayerCallScope&) = delete;

  bool outermost() const { return outermost_; }
  // Read after call() returned, before the scope ends.
  bool float32_output() const { return state().float32_output; }
  static void set_float32_output() { state().float32_output = true; }
  // mixed_bfloat16's float32 form: a model says, just before calling a layer, that every reader
  // of the layer's output rounds it as it reads it (layers::Add), so the call need not round it.
  // The next scope opened on this thread takes the flag.
  static void set_next_output_read_rounded() { state().next_read_rounded = true; }
  static void clear_next_output_read_rounded() { state().next_read_rounded = false; }
  bool output_read_rounded() const { return output_read_rounded_; }
  // A model says, just before calling a layer, that every reader of the layer's output multiplies
  // it transposed and would read a dense transpose written beside it
  // (Layer::reads_input_transposed). The next scope opened on this thread takes the flag; the
  // layer's call() reads it, for the innermost open scope, as current_output_read_transposed().
  static void set_next_output_read_transposed() { state().next_read_transposed = true; }
  static void clear_next_output_read_transposed() { state().next_read_transposed = false; }
  static bool current_output_read_transposed() { return state().current_read_transposed; }

 private:
  // This thread's nesting: the open scopes, the innermost call's float32 output, what the model
  // said about the next call's readers, and what the innermost open call's readers do.
  struct State {
    int depth = 0;
    bool float32_output = false;
    bool next_read_rounded = false;
    bool next_read_transposed = false;
    bool current_read_transposed = false;
  };
  static State& state() {
    thread_local State s;
    return s;
  }
  bool outer_float32_output_;
  bool outermost_;
  bool output_read_rounded_;
  bool outer_read_transposed_;
};

// What a model says about the readers of the next layer's output (LayerCallScope's "read
// rounded" and "read transposed" flags), for as long as the object lives: the next scope opened
// on this thread takes the flags; both are cleared when it ends, whatever happened in between.
class NextOutputReaders {
 public:
  NextOutputReaders(bool read_rounded, bool read_transposed) {
    if (read_rounded) LayerCallScope::set_next_output_read_rounded();
    if (read_transposed) LayerCallScope::set_next_output_read_transposed();
  }
  ~NextOutputReaders() {
    LayerCallScope::clear_next_output_read_rounded();
    LayerCallScope::clear_next_output_read_transposed();
  }
  NextOutputReaders(const NextOutputReaders&) = delete;
  NextOutputReaders& operator=(const NextOutputReaders&) = delete;
};

}  // namespace detail

class Layer : public std::enable_shared_from_this<Layer> {
 public:
  virtual ~Layer();
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  // "Dense", "Conv2D", ... as in Keras' class names.
  virtual std::string class_name() const = 0;
  bool built() const { return built_; }
  bool trainable() const { return trainable_; }
  // The mixed precision policy the layer computes under (fixed at construction).
  const mixed_precision::Policy& dtype_policy() const { return dtype_policy_; }
  // mixed_bfloat16's float32 form, on a CPU where oneDNN has no bfloat16 math (or under an ISA
  // cap below AVX512_CORE) or where its bfloat16 kernels are no faster than its float32 ones
  // (ops::mixed_bfloat16_computes_in_f32: an Intel core without AMX): the layer computes in
  // float32 kernels on float32 tensors that hold bfloat16 values (Tensor::holds_bfloat16_values).
  // Its inputs and weights are rounded to bfloat16 as they come in (autocast), its outputs as
  // they leave (operator()), and the gradients of its inputs as they leave the backward pass;
  // inside the layer, float32, as a bfloat16 kernel accumulates. Each layer call saves a widening
  // before and a narrowing after every kernel; the activations take float32's memory. The outermost
  // call (a model's output, a layer called on its own) still returns bfloat16, as the policy says.
  bool computes_bfloat16_in_float32() const;
  void set_trainable(bool trainable) { trainable_ = trainable; }

  // Eager call (Keras __call__): builds on first use, then call().
  Tensor operator()(const Tensor& inputs, bool training = false);
  Tensor operator()(const std::vector<Tensor>& inputs, bool training = false);
  // Symbolic call for the functional API: records the layer in the graph and returns the
  // symbolic output.
  KerasTensor operator()(const KerasTensor& inputs);
  KerasTensor operator()(const std::vector<KerasTensor>& inputs);

  // Creates the weights for inputs of `input_shapes` (one per input). Single-input layers
  // override build(const Shape&).
  virtual void build(const std::vector<Shape>& input_shapes);
  virtual void build(const Shape& input_shape);
  virtual Tensor call(const std::vector<Tensor>& inputs, bool training);
  virtual Tensor call(const Tensor& inputs, bool training);
  virtual std::vector<Shape> compute_output_shapes(const std::vector<Shape>& input_shapes) const;
  virtual Shape compute_output_shape(const Shape& input_shape) const;
  // Number of inputs the layer takes (merge layers: several).
  virtual bool accepts_multiple_inputs() const { return false; }
  // Whether a training call multiplies its input transposed, and would read a dense transpose of
  // it written beside it by the layer before (Tensor::transposed_copy): a Dense layer's kernel
  // gradient xᵀ·dz on oneDNN's bfloat16 kernels. Models ask it of a layer's readers and tell the
  // layer (detail::LayerCallScope::set_next_output_read_transposed).
  virtual bool reads_input_transposed() const { return false; }

  // Configuration as Keras' get_config (name, trainable and the layer's own options).
  virtual nlohmann::json get_config() const;

  std::vector<Variable> trainable_weights() const;
  std::vector<Variable> non_trainable_weights() const;
  // trainable then non-trainable, in creation order within each (Keras' `weights`).
  std::vector<Variable> weights() const;
  int64_t count_params() const;

  // Marks the layer built without creating weights (build() implementations call this last).
  void set_built() { built_ = true; }

  // Moves a layer that is not yet owned by a shared_ptr into one (used when a temporary layer is
  // called symbolically or passed to Sequential). Implemented by LayerImpl<Derived>.
  virtual std::shared_ptr<Layer> move_to_shared() && = 0;

 protected:
  Layer(Layer&&) = default;
  // `prefix` is the snake_case class name used for automatic names ("dense"). `dtype` names the
  // layer's mixed precision policy; empty takes the global policy current at construction.
  Layer(const std::string& name, const std::string& prefix, const std::string& dtype = "");

  // Creates a weight named "<layer name>/<name>" (a Variable created in the current strategy's
  // scope, if any).
  Variable add_weight(const std::string& name, const Shape& shape,
                      const initializers::Initializer& initializer, bool trainable = true,
                      DType dtype = DType::float32);
  // The policy's dtypes, for build() and call(). compute_dtype() is the dtype of the tensors the
  // layer computes on: float32 in mixed_bfloat16's float32 form (computes_bfloat16_in_float32).
  DType compute_dtype() const;
  DType variable_dtype() const { return dtype_policy_.variable_dtype(); }
  // Keras' autocast: a floating tensor (an input or a variable's value) of another dtype is cast
  // to the compute dtype, differentiably, so float32 variables of a mixed_bfloat16 layer receive
  // float32 gradients. Integer and undefined tensors pass through. In the float32 form a float32
  // input not yet holding bfloat16 values is rounded (to_bfloat16_values, whose gradient
  // is rounded too).
  Tensor autocast(const Tensor& t) const;
  // A variable's value as the layer multiplies it: autocast(value), except in the float32 form,
  // where it is rounded to bfloat16 values with the identity as gradient (round_to_bfloat16), so
  // the float32 variable receives the float32 gradient, as the bfloat16 cast's gradient would be
  // widened to.
  Tensor autocast(const Variable& v) const;
  // In the float32 form, t rounded to bfloat16 values (to_bfloat16_values), as a bfloat16
  // op inside the layer would store it; otherwise t. For a result the layer just computed: t is
  // rounded in place when no other handle sees it.
  Tensor round_like_bfloat16(const Tensor& t) const;
  // Called by call() whose output is float32 by the policy (Keras' float32 softmax under
  // mixed_bfloat16): the float32 form then does not round it.
  static void keep_float32_output();
  // The float32 form's rounding of a call's output, and the outermost call's bfloat16 result: what
  // operator() does after call(), for other entry points (MultiHeadAttention::attend) to do too.
  Tensor finish_call(Tensor y, const detail::LayerCallScope& scope) const;
  // Models: their layers round their own outputs.
  virtual bool contains_layers() const { return false; }
  // Layers that contain layers (models) report their children's weights.
  virtual std::vector<Variable> own_weights() const { return weights_; }
  std::vector<Variable> weights_;

 private:
  void maybe_build(const std::vector<Shape>& shapes);
  std::string name_;
  mixed_precision::Policy dtype_policy_;
  bool built_ = false;
  bool trainable_ = true;
};

// Concrete layers derive from LayerImpl<Derived> to get move_to_shared().
template <typename Derived>
class LayerImpl : public Layer {
 public:
  std::shared_ptr<Layer> move_to_shared() && override {
    return std::make_shared<Derived>(std::move(static_cast<Derived&>(*this)));
  }

 protected:
  using Layer::Layer;
};

// A process-unique name "prefix", "prefix_1", ... (Keras' backend.unique_object_name).
std::string unique_layer_name(const std::string& prefix);
// Resets the automatic name counters (keras.backend.clear_session).
void clear_session();

}  // namespace lockstep::keras
