#pragma once
// Batch and layer normalization over the last axis, as Keras' BatchNormalization(axis=-1) and
// LayerNormalization(axis=-1), forward and backward.
//
// dtypes: x is float32, bfloat16 or float64. Statistics and parameters (gamma, beta, moving mean
// and variance) have x's dtype, except that bfloat16 x takes float32 parameters or bfloat16 ones
// and returns float32 statistics (under mixed_bfloat16 the variables stay float32). Sums are
// accumulated in double. gamma / beta may be undefined (Keras' scale=False / center=False): they
// then act as 1 / 0 and get no gradient.
#include "lockstep/core/tensor.h"

namespace lockstep::ops {

inline constexpr double kKerasNormEpsilon = 1e-3;  // both layers' default

// ---- batch normalization: statistics per channel c (last axis) over all other axes
// --------------- With x viewed as [M, C] (M = product of the leading dimensions):
//   mean[c] = Σ_m x[m, c] / M,   variance[c] = Σ_m (x[m, c] - mean[c])² / M   (biased, as Keras)
//   inv_std[c] = 1 / sqrt(variance[c] + epsilon)
//   output[m, c] = gamma[c] * (x[m, c] - mean[c]) * inv_std[c] + beta[c]
// The caller updates the moving statistics from mean and variance (Keras' momentum rule).

struct BatchNormResult {
  Tensor output;    // x's shape and dtype
  Tensor mean;      // [C]
  Tensor variance;  // [C], biased
  Tensor inv_std;   // [C], kept for the backward pass
};

BatchNormResult batch_norm_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    double epsilon = kKerasNormEpsilon);

// output = gamma * (x - moving_mean) / sqrt(moving_variance + epsilon) + beta
Tensor batch_norm_inference_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    const Tensor& moving_mean, const Tensor& moving_variance,
                                    double epsilon = kKerasNormEpsilon);

struct NormGrads {
  Tensor x;      // x's shape and dtype
  Tensor gamma;  // gamma's shape and dtype; undefined when gamma is
  Tensor beta;   // [C] or [D] in the parameter dtype
};

// With x̂ = (x - mean) * inv_std and sums over m:
//   grad_beta = Σ dy,   grad_gamma = Σ dy x̂,
//   grad_x = gamma * inv_std * (dy - Σ dy / M - x̂ Σ dy x̂ / M)
NormGrads batch_norm_training_backward(const Tensor& grad_output, const Tensor& x,
                                       const Tensor& gamma, const Tensor& mean,
                                       const Tensor& inv_std);

// The moving statistics are constants: grad_x = dy * gamma / sqrt(moving_variance + epsilon).
NormGrads batch_norm_inference_backward(const Tensor& grad_output, const Tensor& x,
                                        const Tensor& gamma, const Tensor& moving_mean,
                                        const Tensor& moving_variance,
                                        double epsilon = kKerasNormEpsilon);

// ---- layer normalization: statistics per row over the last axis (D features) --------------------
//   mean[r] = Σ_d x[r, d] / D,   variance[r] = Σ_d (x[r, d] - mean[r])² / D
//   output[r, d] = gamma[d] * (x[r, d] - mean[r]) * inv_std[r] + beta[d]
// mean and inv_std have x's shape without the last axis.

struct LayerNormResult {
  Tensor output;
  Tensor mean;
  Tensor inv_std;
};

// float32 and bfloat16 rows are normalized in double. bfloat16_values (float32 x only;
// mixed_bfloat16's float32 form, keras/layer.h) computes in float32 instead, as a bfloat16 kernel
// does (the bfloat16 rounding of the output dwarfs the difference; the weight gradients still sum
// the rows in double): the output is stored rounded to bfloat16 values and marked as holding them
// (Tensor::holds_bfloat16_values), and the backward pass, given the same flag, reads grad_output
// rounded to bfloat16 values.
LayerNormResult layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   double epsilon = kKerasNormEpsilon,
                                   bool bfloat16_values = false);

// With x̂ = (x - mean) * inv_std, g = dy * gamma and means over d:
//   grad_x = inv_std * (g - mean(g) - x̂ mean(g x̂)),
//   grad_gamma = Σ_r dy x̂,   grad_beta = Σ_r dy
NormGrads layer_norm_backward(const Tensor& grad_output, const Tensor& x, const Tensor& gamma,
                              const Tensor& mean, const Tensor& inv_std,
                              bool bfloat16_values = false);

}  // namespace lockstep::ops
