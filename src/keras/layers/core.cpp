#include "lockstep/keras/layers/core.h"
#include "lockstep/ops/shape_ops.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/nn_functions.h"
#include "lockstep/distribute/replica_context.h"
#include "lockstep/keras/activations.h"
#include "lockstep/ops/linear.h"
#include "lockstep/ops/matmul.h"

namespace lockstep::keras {

KerasTensor Input(const Shape& shape, DType dtype, const std::string& name) {
  auto layer = std::make_shared<layers::InputLayer>(shape, dtype, name);
  layer->set_built();
  auto node = std::make_shared<KerasNode>(KerasNode{layer, {}});
  return KerasTensor(layer->batch_shape(), dtype, node);
}

namespace layers {

namespace {
// act(x·kernel + bias) with a bfloat16 x and float32 variables, written as `out`: the Dense
// layers of mixed_bfloat16 (out bfloat16; `kernel` / `bias` either the variables' bfloat16-rounded
// float32 copies, see Variable::bfloat16_rounded, multiplied in float32, or their bfloat16 casts
// for oneDNN's bfloat16 kernels) and float32 layers fed bfloat16 activations (out float32, the
// variables' values). Recorded as one op whose inputs are x and the variables'
// values: the rounding's gradient is the identity, so the op's kernel and bias gradients are the
// variables', and they go straight into the tape's destinations (the all-reduce buffer). Compared
// with a round_to_bfloat16 node per weight, or autocasting x to float32 for a float32 layer, this
// saves a copy of each weight's gradient per step and keeps no float32 copy of x for the
// backward pass (only the bfloat16 x, which the previous layer already holds).
Tensor dense_linear(const Tensor& x, const Variable& kernel_var, const Variable& bias_var,
                    const Tensor& kernel, const Tensor& bias, ops::FusedActivation activation,
                    DType out) {
  Tensor y({x.dim(0), kernel.dim(1)}, out);
  ops::linear_into(x, kernel, bias, activation, y);
  const Tensor kernel_value = kernel_var.value();  // notes the reads: tapes watch the variables
  const Tensor bias_value = bias.defined() ? bias_var.value() : Tensor();
  if (autodiff::should_record({&x, &kernel_value, &bias_value})) {
    const bool need_dx = autodiff::should_record({&x});
    const bool has_bias = bias.defined();
    std::vector<Tensor> inputs{x, kernel_value};
    if (has_bias) inputs.push_back(bias_value);
    autodiff::record("linear", inputs, {y},
                     [x, kernel, y, activation, need_dx, has_bias](
                         const std::vector<Tensor>& g, const std::vector<Tensor>& sinks) {
                       auto buffer = [](const Tensor& sink, const Shape& shape) {
                         return sink.defined() && sink.dtype() == DType::float32
                                    ? sink
                                    : Tensor(shape, DType::float32);
                       };
                       std::vector<Tensor> grads(has_bias ? 3 : 2);
                       if (need_dx) grads[0] = Tensor(x.shape(), x.dtype());
                       grads[1] = buffer(sinks[1], kernel.shape());
                       if (has_bias) grads[2] = buffer(sinks[2], Shape{kernel.dim(1)});
                       ops::linear_backward_into(g[0], x, kernel, y, activation, grads[0], grads[1],
                                                 has_bias ? grads[2] : Tensor());
                       return grads;
                     });
  }
  return y;
}
}  // namespace

InputLayer::InputLayer(const Shape& shape, DType dtype, const std::string& name)
    : LayerImpl(name, "input_layer"), batch_shape_(shape.with_inserted(0, 0)), dtype_(dtype) {}

Tensor InputLayer::call(const Tensor& inputs, bool) {
  if (inputs.rank() != batch_shape_.rank() || !(inputs.shape().with_dim(0, 0) == batch_shape_)) {
    throw InvalidArgument("Input '" + name() + "' expects batches of shape " +
                          batch_shape_.to_string() +
                          " (batch first; 0 = any). Received: " + inputs.describe() + ".");
  }
  return inputs;
}

nlohmann::json InputLayer::get_config() const {
  auto c = Layer::get_config();
  c["batch_shape"] = batch_shape_.to_vector();
  c["dtype"] = std::string(dtype_name(dtype_));
  return c;
}

Dense::Dense(DenseOptions options)
    : LayerImpl(options.name, "dense", options.dtype), options_(options) {
  if (options_.units <= 0) {
    throw InvalidArgument(
        "Dense: expected units > 0. Received: units=" + std::to_string(options_.units) + ".");
  }
  activations::get(options_.activation);  // validates the name now, not at first call
}

void Dense::build(const Shape& input_shape) {
  if (input_shape.rank() < 2) {
    throw InvalidArgument("Dense '" + name() +
                          "' expects inputs of rank >= 2 ([batch, features])."
                          " Received shape " +
                          input_shape.to_string() + ".");
  }
  int64_t in = input_shape[input_shape.rank() - 1];
  const DType vdt = dtype_policy().variable_dtype();
  kernel_ = add_weight("kernel", {in, options_.units},
                       *initializers::get(options_.kernel_initializer), true, vdt);
  if (options_.use_bias) {
    bias_ = add_weight("bias", {options_.units}, *initializers::get(options_.bias_initializer),
                       true, vdt);
  }
}

Tensor Dense::call(const Tensor& inputs, bool) {
  int64_t in = kernel_.shape()[0];
  if (inputs.rank() < 1 || inputs.dim(-1) != in) {
    throw InvalidArgument("Dense '" + name() + "' expects inputs with last dimension " +
                          std::to_string(in) + " (kernel " + kernel_.shape().to_string() +
                          "). Received: " + inputs.describe() + ".");
  }
  Shape out_shape = compute_output_shape(inputs.shape());
  Tensor x = inputs.rank() != 2 ? reshape(inputs, Shape{inputs.num_elements() / in, in}) : inputs;
  const DType compute = compute_dtype();
  const bool f32_weights = kernel_.dtype() == DType::float32;
  const bool fusable = activations::is_fusable(options_.activation);
  const ops::FusedActivation kind =
      fusable ? activations::fused_kind(options_.activation) : ops::FusedActivation::none;
  // A float32 layer fed bfloat16 activations (a float32 output layer under mixed_bfloat16) takes
  // them as they are instead of autocasting them to a float32 copy: the matmul widens them anyway.
  if (!(x.dtype() == DType::bfloat16 && compute == DType::float32 && f32_weights &&
        kind != ops::FusedActivation::gelu)) {
    x = autocast(x);  // Keras: floating inputs take the compute dtype
  }
  Tensor y;
  if (x.dtype() == DType::bfloat16 && f32_weights && kind != ops::FusedActivation::gelu &&
      (compute == DType::float32 || compute == DType::bfloat16)) {
    // bfloat16 activations, float32 variables, see dense_linear. A float32 layer keeps its
    // weights. Under mixed_bfloat16 the weights are multiplied as bfloat16 values: their cached
    // rounded float32 copies when this shape computes in float32, else bfloat16 casts for
    // oneDNN's bfloat16 kernels (ops::bf16_matmul_computes_in_f32 picks the faster). Either way
    // the activations stay bfloat16 and the gradients reach the variables in float32.
    Tensor kernel = kernel_.raw_value(), bias = options_.use_bias ? bias_.raw_value() : Tensor();
    if (compute == DType::bfloat16) {
      if (ops::bf16_matmul_computes_in_f32(x.dim(0), x.dim(1), options_.units)) {
        kernel = kernel_.bfloat16_rounded();
        if (bias.defined()) bias = bias_.bfloat16_rounded();
      } else {
        kernel = ops::cast_forward(kernel, DType::bfloat16);
        if (bias.defined()) bias = ops::cast_forward(bias, DType::bfloat16);
      }
    }
    y = dense_linear(x, kernel_, bias_, kernel, bias, kind, compute);
  } else {
    Tensor kernel = autocast(kernel_.value());
    Tensor bias = options_.use_bias ? autocast(bias_.value()) : Tensor();
    y = linear(x, kernel, bias, kind);
  }
  if (!fusable) {
    if (options_.activation == "softmax" && y.dtype() == DType::bfloat16) {
      y = cast(y, DType::float32);
    }
    y = activations::get(options_.activation)(y);
  }
  return inputs.rank() != 2 ? reshape(y, out_shape) : y;
}

Shape Dense::compute_output_shape(const Shape& input_shape) const {
  return input_shape.with_dim(-1, options_.units);
}

nlohmann::json Dense::get_config() const {
  auto c = Layer::get_config();
  c["units"] = options_.units;
  c["activation"] = options_.activation;
  c["use_bias"] = options_.use_bias;
  c["kernel_initializer"] = options_.kernel_initializer;
  c["bias_initializer"] = options_.bias_initializer;
  c["dtype"] = dtype_policy().name();
  return c;
}

Activation::Activation(const std::string& activation, const std::string& name)
    : LayerImpl(name, "activation"), activation_(activation) {
  activations::get(activation_);
}

Tensor Activation::call(const Tensor& inputs, bool) {
  return activations::get(activation_)(inputs);
}

nlohmann::json Activation::get_config() const {
  auto c = Layer::get_config();
  c["activation"] = activation_;
  return c;
}

Flatten::Flatten(const std::string& name) : LayerImpl(name, "flatten") {}

Shape Flatten::compute_output_shape(const Shape& s) const {
  int64_t n = 1;
  for (int i = 1; i < s.rank(); ++i) n *= s[i];
  return Shape{s.rank() ? s[0] : 1, n};
}

Tensor Flatten::call(const Tensor& inputs, bool) {
  return reshape(inputs, compute_output_shape(inputs.shape()));
}

Reshape::Reshape(std::vector<int64_t> target_shape, const std::string& name)
    : LayerImpl(name, "reshape"), target_(std::move(target_shape)) {
  int unknown = 0;
  for (int64_t d : target_) {
    if (d == -1)
      ++unknown;
    else if (d < 0)
      throw InvalidArgument("Reshape: dimensions must be >= 0 or -1.");
  }
  if (unknown > 1) throw InvalidArgument("Reshape: at most one dimension can be -1.");
}

Shape Reshape::resolve(const Shape& in) const {
  int64_t per_example = 1;
  for (int i = 1; i < in.rank(); ++i) per_example *= in[i];
  int64_t known = 1;
  for (int64_t d : target_)
    if (d != -1) known *= d;
  Shape out{in.rank() ? in[0] : 0};
  for (int64_t d : target_) {
    if (d == -1) {
      if (known == 0 || per_example % known != 0) {
        throw InvalidArgument("Reshape '" + name() + "': cannot reshape " + in.to_string() +
                              " to a target with " + std::to_string(known) + " elements.");
      }
      out.push_back(per_example / known);
    } else {
      out.push_back(d);
    }
  }
  if (out.num_elements() != in.num_elements() && in[0] != 0) {
    throw InvalidArgument("Reshape '" + name() + "': input shape " + in.to_string() +
                          " does not have the target's element count (target " + out.to_string() +
                          ").");
  }
  return out;
}

Shape Reshape::compute_output_shape(const Shape& input_shape) const {
  return resolve(input_shape);
}

Tensor Reshape::call(const Tensor& inputs, bool) {
  return reshape(inputs, resolve(inputs.shape()));
}

nlohmann::json Reshape::get_config() const {
  auto c = Layer::get_config();
  c["target_shape"] = target_;
  return c;
}

Dropout::Dropout(DropoutOptions options)
    : LayerImpl(options.name, "dropout"),
      options_(options),
      seed_(options.seed ? *options.seed : next_seed()) {
  if (options_.rate < 0 || options_.rate >= 1) {
    throw InvalidArgument(
        "Dropout: expected 0 <= rate < 1. Received: rate=" + std::to_string(options_.rate) + ".");
  }
}

Generator& Dropout::generator_for_this_thread() {
  auto* ctx = distribute::get_replica_context();
  size_t r = ctx ? static_cast<size_t>(ctx->replica_id_in_sync_group()) : 0;
  Generator* shared = nullptr;
  {
    std::lock_guard lock(*mu_);
    if (generators_.size() <= r) generators_.resize(r + 1);
    if (!generators_[r]) generators_[r] = std::make_unique<Generator>(seed_, r);
    shared = generators_[r].get();
  }
  // A training step may run a replica's task twice (a backup); the stream advances once, by the
  // run that commits.
  return ctx ? ctx->replica_local(*shared, *mu_) : *shared;
}

std::vector<std::pair<uint64_t, uint32_t>> Dropout::generator_positions(int num_replicas) const {
  std::lock_guard lock(*mu_);
  std::vector<std::pair<uint64_t, uint32_t>> out(static_cast<size_t>(num_replicas), {0, 0});
  for (size_t r = 0; r < generators_.size() && r < out.size(); ++r) {
    if (!generators_[r]) continue;
    Generator::State s = generators_[r]->state();
    out[r] = {s.counter, s.buffered};
  }
  return out;
}

void Dropout::set_generator_positions(const std::vector<std::pair<uint64_t, uint32_t>>& positions) {
  std::lock_guard lock(*mu_);
  generators_.resize(std::max(generators_.size(), positions.size()));
  for (size_t r = 0; r < positions.size(); ++r) {
    generators_[r] = std::make_unique<Generator>(seed_, r);
    generators_[r]->set_state({seed_, r, positions[r].first, positions[r].second});
  }
}

Tensor Dropout::call(const Tensor& inputs, bool training) {
  if (!training || options_.rate == 0) return inputs;
  return dropout(inputs, options_.rate, generator_for_this_thread());
}

nlohmann::json Dropout::get_config() const {
  auto c = Layer::get_config();
  c["rate"] = options_.rate;
  if (options_.seed) c["seed"] = *options_.seed;
  return c;
}

}  // namespace layers
}  // namespace lockstep::keras
