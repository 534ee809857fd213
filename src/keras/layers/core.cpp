#include "lockstep/keras/layers/core.h"

#include <algorithm>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/nn_functions.h"
#include "lockstep/distribute/replica_context.h"
#include "lockstep/keras/activations.h"
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
// round_to_bfloat16(v.value()) without the pass over the weights: the variable's cached rounded
// copy, which the optimizer rewrites as it updates the weights (Variable::bfloat16_rounded). On
// recording tapes it is the output of a round_to_bfloat16 node with the identity gradient, as
// before; the view gives each use its own tensor id, hence its own node.
Tensor rounded_weight(const Variable& v) {
  Tensor value = v.value();  // notes the read: recording tapes watch the variable
  Tensor rounded = v.bfloat16_rounded().reshape(v.shape());
  if (autodiff::should_record({&value})) {
    autodiff::record("round_to_bfloat16", {value}, {rounded},
                     [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  }
  return rounded;
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
  // Autocast (Keras): floating inputs and the variables take the compute dtype.
  Tensor x = autocast(inputs);
  Shape out_shape = compute_output_shape(inputs.shape());
  if (inputs.rank() != 2) x = reshape(x, Shape{inputs.num_elements() / in, in});
  Tensor kernel, bias;
  if (x.dtype() == DType::bfloat16 && kernel_.dtype() == DType::float32 &&
      ops::bf16_matmul_computes_in_f32()) {
    // mixed_bfloat16 without AMX: the matmuls widen bfloat16 operands to float32 anyway, so the
    // weights are rounded to bfloat16 values in place of a bfloat16 copy (one pass instead of a
    // cast, a widening per matmul and a round trip of the kernel's gradient; the same values).
    // Activations stay bfloat16; the float32 gradient reaches the variable unrounded.
    kernel = rounded_weight(kernel_);
    if (options_.use_bias) bias = rounded_weight(bias_);
  } else {
    kernel = autocast(kernel_.value());
    bias = options_.use_bias ? autocast(bias_.value()) : Tensor();
  }
  Tensor y;
  if (activations::is_fusable(options_.activation)) {
    y = linear(x, kernel, bias, activations::fused_kind(options_.activation));
  } else {
    Tensor z = linear(x, kernel, bias);
    if (options_.activation == "softmax" && z.dtype() == DType::bfloat16) {
      z = cast(z, DType::float32);
    }
    y = activations::get(options_.activation)(z);
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
  std::lock_guard lock(*mu_);
  if (generators_.size() <= r) generators_.resize(r + 1);
  if (!generators_[r]) generators_[r] = std::make_unique<Generator>(seed_, r);
  return *generators_[r];
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
