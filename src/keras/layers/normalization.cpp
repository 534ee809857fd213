#include "lockstep/keras/layers/normalization.h"

#include <nlohmann/json.hpp>
#include <vector>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/nn_functions.h"
#include "lockstep/core/check.h"
#include "lockstep/distribute/replica_context.h"

namespace lockstep::keras::layers {

namespace {

void require_last_axis(const std::string& layer, int axis) {
  LOCKSTEP_CHECK(axis == -1, layer,
                 ": only axis=-1 (the last axis) is supported. Received: axis=", axis, ".");
}

void require_epsilon(const std::string& layer, double epsilon) {
  LOCKSTEP_CHECK(epsilon > 0, layer, ": expected epsilon > 0. Received: epsilon=", epsilon, ".");
}

}  // namespace

BatchNormalization::BatchNormalization(BatchNormalizationOptions options)
    : LayerImpl(options.name, "batch_normalization", options.dtype), options_(std::move(options)) {
  require_last_axis("BatchNormalization", options_.axis);
  require_epsilon("BatchNormalization", options_.epsilon);
  LOCKSTEP_CHECK(options_.momentum >= 0 && options_.momentum <= 1,
                 "BatchNormalization: expected 0 <= momentum <= 1. Received: momentum=",
                 options_.momentum, ".");
  for (const std::string* init :
       {&options_.beta_initializer, &options_.gamma_initializer, &options_.moving_mean_initializer,
        &options_.moving_variance_initializer}) {
    initializers::get(*init);
  }
}

void BatchNormalization::build(const Shape& input_shape) {
  LOCKSTEP_CHECK(input_shape.rank() >= 2, "BatchNormalization '", name(),
                 "' expects inputs of rank >= 2 ([batch, ..., channels]). Received shape ",
                 input_shape, ".");
  const Shape c{input_shape.dim(-1)};
  const DType d = variable_dtype();
  if (options_.scale)
    gamma_ = add_weight("gamma", c, *initializers::get(options_.gamma_initializer), true, d);
  if (options_.center)
    beta_ = add_weight("beta", c, *initializers::get(options_.beta_initializer), true, d);
  moving_mean_ =
      add_weight("moving_mean", c, *initializers::get(options_.moving_mean_initializer), false, d);
  moving_variance_ = add_weight("moving_variance", c,
                                *initializers::get(options_.moving_variance_initializer), false, d);
}

Tensor BatchNormalization::call(const Tensor& inputs, bool training) {
  const int64_t channels = moving_mean_.shape()[0];
  LOCKSTEP_CHECK(inputs.rank() >= 2 && inputs.dim(-1) == channels, "BatchNormalization '", name(),
                 "' expects inputs with ", channels,
                 " channels on the last axis. Received: ", inputs.describe(), ".");
  // x takes the compute dtype; gamma, beta and the moving statistics stay in the variable dtype
  // (under mixed_bfloat16 the kernels read bfloat16 x with float32 parameters and compute the
  // statistics in float32, as Keras computes normalization in float32 under mixed policies).
  Tensor x = autocast(inputs);
  Tensor gamma = options_.scale ? gamma_.value() : Tensor();
  Tensor beta = options_.center ? beta_.value() : Tensor();
  if (!training || !trainable()) {
    return batch_norm_inference(x, gamma, beta, moving_mean_.raw_value(),
                                moving_variance_.raw_value(), options_.epsilon);
  }
  BatchNormOutput r = batch_norm(x, gamma, beta, options_.epsilon);
  // The moving statistics are not differentiated: plain host arithmetic, outside any tape.
  const int64_t c = channels;
  const double m = static_cast<double>(x.num_elements() / c);
  Tensor mean = r.mean.to(DType::float64), var = r.variance.to(DType::float64);
  // [count, Σx (C), Σx² (C)]: one all-reduce carries everything the global statistics need.
  Tensor packed = Tensor::zeros({1 + 2 * c}, DType::float64);
  double* p = packed.data<double>();
  p[0] = m;
  for (int64_t i = 0; i < c; ++i) {
    const double mu = mean.data<double>()[i];
    p[1 + i] = m * mu;
    p[1 + c + i] = m * (var.data<double>()[i] + mu * mu);
  }
  // The moving statistics follow the statistics of the whole global batch: every replica's
  // [count, sums] are summed after the step's replicas have finished (sum_after_step), in replica
  // order, and the update runs once. Replicas with an empty slice contribute nothing.
  auto update = [this, c](const Tensor& total) {
    const double* p = total.data<double>();
    if (p[0] <= 0) return;
    Tensor new_mean({c}, DType::float64), new_var({c}, DType::float64);
    const double k = options_.momentum;
    Tensor old_mean = moving_mean_.raw_value().to(DType::float64);
    Tensor old_var = moving_variance_.raw_value().to(DType::float64);
    for (int64_t i = 0; i < c; ++i) {
      const double mu = p[1 + i] / p[0];
      const double v = std::max(0.0, p[1 + c + i] / p[0] - mu * mu);
      new_mean.data<double>()[i] = old_mean.data<double>()[i] * k + mu * (1 - k);
      new_var.data<double>()[i] = old_var.data<double>()[i] * k + v * (1 - k);
    }
    moving_mean_.assign(new_mean.to(moving_mean_.dtype()));
    moving_variance_.assign(new_var.to(moving_variance_.dtype()));
  };
  if (auto* ctx = distribute::get_replica_context()) {
    ctx->sum_after_step(this, packed, update);
  } else {
    update(packed);
  }
  return r.output;
}

nlohmann::json BatchNormalization::get_config() const {
  auto c = Layer::get_config();
  c["axis"] = options_.axis;
  c["momentum"] = options_.momentum;
  c["epsilon"] = options_.epsilon;
  c["center"] = options_.center;
  c["scale"] = options_.scale;
  c["beta_initializer"] = options_.beta_initializer;
  c["gamma_initializer"] = options_.gamma_initializer;
  c["moving_mean_initializer"] = options_.moving_mean_initializer;
  c["moving_variance_initializer"] = options_.moving_variance_initializer;
  c["synchronized"] = false;
  c["dtype"] = dtype_policy().name();
  return c;
}

LayerNormalization::LayerNormalization(LayerNormalizationOptions options)
    : LayerImpl(options.name, "layer_normalization", options.dtype), options_(std::move(options)) {
  require_last_axis("LayerNormalization", options_.axis);
  require_epsilon("LayerNormalization", options_.epsilon);
  initializers::get(options_.beta_initializer);
  initializers::get(options_.gamma_initializer);
}

void LayerNormalization::build(const Shape& input_shape) {
  LOCKSTEP_CHECK(input_shape.rank() >= 1, "LayerNormalization '", name(),
                 "' expects inputs of rank >= 1. Received a scalar shape.");
  const Shape d{input_shape.dim(-1)};
  if (options_.scale) {
    gamma_ = add_weight("gamma", d, *initializers::get(options_.gamma_initializer), true,
                        variable_dtype());
  }
  if (options_.center) {
    beta_ = add_weight("beta", d, *initializers::get(options_.beta_initializer), true,
                       variable_dtype());
  }
}

Tensor LayerNormalization::call(const Tensor& inputs, bool) {
  const Variable& any = options_.scale ? gamma_ : beta_;
  LOCKSTEP_CHECK(!any.defined() || (inputs.rank() >= 1 && inputs.dim(-1) == any.shape()[0]),
                 "LayerNormalization '", name(), "' expects inputs with ", any.shape()[0],
                 " features on the last axis. Received: ", inputs.describe(), ".");
  Tensor gamma = options_.scale ? gamma_.value() : Tensor();
  Tensor beta = options_.center ? beta_.value() : Tensor();
  // The float32 form rounds the output (and its gradient) as the kernels write it.
  return layer_norm(autocast(inputs), gamma, beta, options_.epsilon,
                    computes_bfloat16_in_float32());
}

nlohmann::json LayerNormalization::get_config() const {
  auto c = Layer::get_config();
  c["axis"] = options_.axis;
  c["epsilon"] = options_.epsilon;
  c["center"] = options_.center;
  c["scale"] = options_.scale;
  c["rms_scaling"] = false;
  c["beta_initializer"] = options_.beta_initializer;
  c["gamma_initializer"] = options_.gamma_initializer;
  c["dtype"] = dtype_policy().name();
  return c;
}

}  // namespace lockstep::keras::layers
