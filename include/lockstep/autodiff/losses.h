#pragma once
// Differentiable losses with Keras' numerics (formulas in lockstep/ops/losses.h). Each returns
// the per-example loss (y_pred's shape without the class / last axis, e.g. [batch]); reducing it
// (sum over the global batch, mean) is the caller's (Keras' Loss objects') business. Gradients
// flow to y_pred, and for mean_squared_error / mean_absolute_error also to y_true.
#include "lockstep/core/tensor.h"

namespace lockstep {

Tensor categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred,
                                bool from_logits = false, int axis = -1);
// From logits [rows, classes] and their softmax `probabilities`
// (ops::softmax_crossentropy_forward); the gradient flows to the logits only.
Tensor softmax_crossentropy(const Tensor& y_true, const Tensor& logits,
                            const Tensor& probabilities);
// labels: int32 / int64 [...]; y_pred: [..., classes].
Tensor sparse_categorical_crossentropy(const Tensor& labels, const Tensor& y_pred,
                                       bool from_logits = false);
Tensor binary_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits = false);
Tensor mean_squared_error(const Tensor& y_true, const Tensor& y_pred);
Tensor mean_absolute_error(const Tensor& y_true, const Tensor& y_pred);

}  // namespace lockstep
