#pragma once
// Softmax and log-softmax along one axis, forward and backward. Floating dtypes, any rank (up to
// 6 for float32 / bfloat16, which run oneDNN's softmax primitives; float64 runs loops).
//
//   softmax      y_i = exp(x_i − m) / Σ_j exp(x_j − m),   m = max_j x_j (for stability)
//                dx_i = y_i (dy_i − Σ_j dy_j y_j)
//   log_softmax  y_i = x_i − m − log Σ_j exp(x_j − m)
//                dx_i = dy_i − exp(y_i) Σ_j dy_j
#include "lockstep/core/tensor.h"

namespace lockstep::ops {

Tensor softmax_forward(const Tensor& x, int axis = -1);
Tensor softmax_backward(const Tensor& dy, const Tensor& y, int axis = -1);
Tensor log_softmax_forward(const Tensor& x, int axis = -1);
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y, int axis = -1);

}  // namespace lockstep::ops
