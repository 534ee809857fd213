#pragma once
// Internal to the ops layer: GELU's kernels for both forms (formulas in lockstep/ops/gelu.h).
#include "lockstep/core/tensor.h"

namespace lockstep::ops::detail {

Tensor gelu_forward(const Tensor& x, bool approximate);
Tensor gelu_backward(const Tensor& dy, const Tensor& x, bool approximate);
// dx = dy ⊙ gelu'(x) written into dx (x's shape and dtype; it may alias dy).
void gelu_backward_into(const Tensor& dy, const Tensor& x, const Tensor& dx, bool approximate);
// mixed_bfloat16's float32 form: y[i] = gelu(z[i]) (exact form, oneDNN's eltwise kernel) rounded
// to bfloat16 values, for n float32 values; y may be z. Per element the bits do not depend on n.
void gelu_to_bfloat16_values_into(const float* z, float* y, int64_t n);

}  // namespace lockstep::ops::detail
