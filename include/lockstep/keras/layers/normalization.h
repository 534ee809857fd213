#pragma once
// Normalization layers over the last axis (Keras' axis=-1 default; other axes are not supported).
//
// BatchNormalization, with statistics per channel c over every other axis (x viewed as [M, C]):
//   training (and trainable):  y = gamma * (x - mean_B) / sqrt(var_B + epsilon) + beta,
//       mean_B, var_B the batch's mean and biased variance (Σ (x - mean_B)² / M), then
//       moving_mean     = moving_mean     * momentum + mean_B * (1 - momentum)
//       moving_variance = moving_variance * momentum + var_B  * (1 - momentum)
//     Keras 3 also feeds the biased variance to the moving average (ops.moments, no Bessel
//     correction; checked against keras/src/layers/normalization/batch_normalization.py).
//   inference (or trainable = false, as Keras):
//       y = gamma * (x - moving_mean) / sqrt(moving_variance + epsilon) + beta
//   gamma, beta [C] trainable; moving_mean, moving_variance [C] non-trainable.
//
// Under a distribution strategy every replica thread calls the same layer at once. Each replica
// normalizes with its own batch (Keras' synchronized=False), but the moving statistics are
// updated once, from the statistics of the global batch: the replicas all-reduce (SUM) their
// element counts, Σx and Σx² per channel, so that
//       mean_G = Σx / M_G,   var_G = Σx² / M_G - mean_G²
// (what SyncBatchNormalization would compute), and local replica 0 of each worker assigns the
// moving averages. The variables therefore never race and do not depend on how the global batch
// was split.
//
// LayerNormalization, per row r over the last axis (D features):
//   y = gamma * (x - mean_r) / sqrt(var_r + epsilon) + beta,   gamma, beta [D] trainable.
//
// Not supported (Keras options): axis other than the last, regularizers, constraints,
// BatchNormalization(synchronized=True) normalization, LayerNormalization(rms_scaling=True).
#include <string>

#include "lockstep/keras/layer.h"

namespace lockstep::keras::layers {

struct BatchNormalizationOptions {
  int axis = -1;  // only the last axis
  double momentum = 0.99;
  double epsilon = 1e-3;
  bool center = true;  // create and add beta
  bool scale = true;   // create and multiply by gamma
  std::string beta_initializer = "zeros";
  std::string gamma_initializer = "ones";
  std::string moving_mean_initializer = "zeros";
  std::string moving_variance_initializer = "ones";
  // The dtype policy ("" = global): variables in its variable dtype, inputs cast to its compute
  // dtype; the statistics are computed in float32 (or float64) whatever the compute dtype.
  std::string dtype = "";
  std::string name = "";
};

class BatchNormalization : public LayerImpl<BatchNormalization> {
 public:
  explicit BatchNormalization(BatchNormalizationOptions options = {});
  std::string class_name() const override { return "BatchNormalization"; }
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& inputs, bool training) override;
  nlohmann::json get_config() const override;
  const Variable& gamma() const { return gamma_; }
  const Variable& beta() const { return beta_; }
  const Variable& moving_mean() const { return moving_mean_; }
  const Variable& moving_variance() const { return moving_variance_; }

 private:
  void update_moving_statistics(const Tensor& x);
  BatchNormalizationOptions options_;
  Variable gamma_, beta_, moving_mean_, moving_variance_;
};

struct LayerNormalizationOptions {
  int axis = -1;  // only the last axis
  double epsilon = 1e-3;
  bool center = true;
  bool scale = true;
  std::string beta_initializer = "zeros";
  std::string gamma_initializer = "ones";
  std::string dtype = "";  // the dtype policy, as BatchNormalizationOptions::dtype
  std::string name = "";
};

class LayerNormalization : public LayerImpl<LayerNormalization> {
 public:
  explicit LayerNormalization(LayerNormalizationOptions options = {});
  std::string class_name() const override { return "LayerNormalization"; }
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& inputs, bool training) override;
  nlohmann::json get_config() const override;
  const Variable& gamma() const { return gamma_; }
  const Variable& beta() const { return beta_; }

 private:
  LayerNormalizationOptions options_;
  Variable gamma_, beta_;
};

}  // namespace lockstep::keras::layers
