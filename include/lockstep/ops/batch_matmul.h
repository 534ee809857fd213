#pragma once
// Batched matrix multiplication (tf.matmul / keras.ops.matmul on operands of rank >= 3), forward
// and backward.
//
//   op(a) = transpose_a ? a with its last two axes swapped : a      (likewise op(b))
//   a [..., M, K] (or [..., K, M]),  b [..., K, N] (or [..., N, K]),  y [..., M, N]
//   y[i] = op(a[i]) · op(b[i])   for every index i of the leading (batch) axes
//
// Both operands have the same rank (>= 3), the same batch axes (no broadcasting) and the same
// dtype. float32 and bfloat16 run oneDNN's matmul, one call for the whole batch (transposes are
// read through strides, nothing is copied; bfloat16 operands use its bfloat16 kernels and
// accumulate in float32); float64 runs a plain loop (gradient checks). y has a's dtype.
#include "lockstep/core/tensor.h"

namespace lockstep::ops {

Tensor batch_matmul_forward(const Tensor& a, const Tensor& b, bool transpose_a = false,
                            bool transpose_b = false);

// Gradients of y = op(a)·op(b) per batch index, given dy ([..., M, N]):
//   dL/dop(a) = dy · op(b)ᵀ,   dL/dop(b) = op(a)ᵀ · dy,   transposed back when transpose_a/_b.
// Each is undefined when not requested.
struct BatchMatmulGrads {
  Tensor da, db;
};
BatchMatmulGrads batch_matmul_backward(const Tensor& dy, const Tensor& a, const Tensor& b,
                                       bool transpose_a = false, bool transpose_b = false,
                                       bool need_da = true, bool need_db = true);

}  // namespace lockstep::ops
