#pragma once
// Loss kernels with Keras' numerics, forward and backward. Each returns the per-example loss
// (the input shape without the class axis / last axis); the backward takes dloss of that shape and
// returns the gradient with respect to y_pred (and y_true where it is differentiable).
//
// Categorical cross-entropy (y_true, y_pred: [..., C] along `axis`):
//   from probabilities:  p = y_pred / Σ y_pred,  p̂ = clip(p, ε, 1 − ε),  ε = 1e-7
//                        loss = −Σ y_true · log p̂      (zero gradient where p was clipped)
//   from logits:         loss = −Σ y_true · log_softmax(y_pred)
//                        dy_pred = dloss · (softmax(y_pred) · Σ y_true − y_true)
// Sparse categorical cross-entropy (labels: int32/int64 [...], y_pred: [..., C], classes last):
//   from probabilities (as Keras: clip, log, then softmax cross-entropy on the logs):
//                        p̂ = clip(y_pred, ε, 1 − ε),  loss = log Σ_j p̂_j − log p̂_label
//   from logits:         loss = logsumexp(y_pred) − y_pred[label]
//   A label outside [0, C) throws InvalidArgument.
// Binary cross-entropy (y_true, y_pred: [..., K]), mean over the last axis:
//   from probabilities:  p̂ = clip(y_pred, ε, 1 − ε),  l = −(y log p̂ + (1 − y) log(1 − p̂))
//   from logits:         l = max(z, 0) − z y + log(1 + e^−|z|)
// Mean squared / absolute error (y_true, y_pred: [..., K]), mean over the last axis:
//   mse = mean((y_pred − y_true)²),  mae = mean(|y_pred − y_true|)  (d|u|/du = sign(u), 0 at 0)
#include "lockstep/core/tensor.h"

namespace lockstep::ops {

inline constexpr double kLossEpsilon = 1e-7;  // keras.backend.epsilon()

Tensor categorical_crossentropy_forward(const Tensor& y_true, const Tensor& y_pred,
                                        bool from_logits = false, int axis = -1);
Tensor categorical_crossentropy_backward(const Tensor& dloss, const Tensor& y_true,
                                         const Tensor& y_pred, bool from_logits = false,
                                         int axis = -1);

// Categorical cross-entropy from logits z [rows, classes] whose softmax p is already known (a
// softmax layer's output): loss_r = Σ_k y_rk (lse_r − z_rk) with lse_r = z_rj − log p_rj at the
// row's largest probability j (exact: log p_j = z_j − lse; at the largest p the log is well
// conditioned), and dL/dz = dloss · (p Σ_k y_k − y). No exponentials: the softmax's own are reused.
// Rows whose p holds NaN or inf give NaN.
Tensor softmax_crossentropy_forward(const Tensor& y_true, const Tensor& logits,
                                    const Tensor& probabilities);
Tensor softmax_crossentropy_backward(const Tensor& dloss, const Tensor& y_true,
                                     const Tensor& probabilities);

Tensor sparse_categorical_crossentropy_forward(const Tensor& labels, const Tensor& y_pred,
                                               bool from_logits = false);
Tensor sparse_categorical_crossentropy_backward(const Tensor& dloss, const Tensor& labels,
                                                const Tensor& y_pred, bool from_logits = false);

Tensor binary_crossentropy_forward(const Tensor& y_true, const Tensor& y_pred,
                                   bool from_logits = false);
Tensor binary_crossentropy_backward(const Tensor& dloss, const Tensor& y_true, const Tensor& y_pred,
                                    bool from_logits = false);

// Gradients with respect to y_true and y_pred (y_true's is the negative of y_pred's).
struct RegressionLossGrads {
  Tensor dy_true, dy_pred;
};
Tensor mean_squared_error_forward(const Tensor& y_true, const Tensor& y_pred);
RegressionLossGrads mean_squared_error_backward(const Tensor& dloss, const Tensor& y_true,
                                                const Tensor& y_pred);
Tensor mean_absolute_error_forward(const Tensor& y_true, const Tensor& y_pred);
RegressionLossGrads mean_absolute_error_backward(const Tensor& dloss, const Tensor& y_true,
                                                 const Tensor& y_pred);

}  // namespace lockstep::ops
