#pragma once
// Matrix multiplication, forward and backward.
//
//   op(a) = transpose_a ? aᵀ : a,   op(b) = transpose_b ? bᵀ : b
//   y = op(a) · op(b)               op(a): [m, k], op(b): [k, n], y: [m, n]
//
// Rank-2 operands only. float32 and bfloat16 run through oneDNN (bf16 inputs accumulate in
// float32; the output may be bfloat16 or float32); float64 runs a plain loop (for gradient checks).
// Both operands must have the same dtype. Transposes are free: oneDNN reads the operand through
// strides, nothing is copied.
#include "lockstep/core/tensor.h"

namespace lockstep::ops {

// y = op(a)·op(b), in a's dtype.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);
// Writes op(a)·op(b) into `out` ([m, n]; dtype a's, or float32 when a and b are bfloat16).
void matmul_into(const Tensor& a, const Tensor& b, const Tensor& out, bool transpose_a = false,
                 bool transpose_b = false);

// Gradients of y = op(a)·op(b) given dy = dL/dy ([m, n]):
//   dL/dop(a) = dy · op(b)ᵀ,  dL/dop(b) = op(a)ᵀ · dy; transposed back when transpose_a/_b.
// Each is undefined when not requested.
struct MatmulGrads {
  Tensor da, db;
};
// True when bfloat16 operands are multiplied by widening them to float32 and running the float32
// kernel (machines without AMX, where the bfloat16 dot product is slower than float32 FMA; see
// LOCKSTEP_BF16_MATMUL in matmul.cpp). Depends on the machine and the environment only.
bool bf16_matmul_computes_in_f32();

MatmulGrads matmul_backward(const Tensor& dy, const Tensor& a, const Tensor& b, bool transpose_a,
                            bool transpose_b, bool need_da = true, bool need_db = true);

}  // namespace lockstep::ops
