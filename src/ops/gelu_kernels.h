#pragma once
// Internal to the ops layer: GELU's kernels for both forms (formulas in lockstep/ops/gelu.h).
#include "lockstep/core/tensor.h"

namespace lockstep::ops::detail {

Tensor gelu_forward(const Tensor& x, bool approximate);
Tensor gelu_backward(const Tensor& dy, const Tensor& x, bool approximate);
// dx = dy ⊙ gelu'(x) written into dx (x's shape and dtype; it may alias dy).
void gelu_backward_into(const Tensor& dy, const Tensor& x, const Tensor& dx, bool approximate);

}  // namespace lockstep::ops::detail
