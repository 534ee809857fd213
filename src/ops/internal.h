#pragma once
// Internal to the ops layer: kernels that several op families share.
#include "lockstep/core/tensor.h"
#include "lockstep/ops/linear.h"

namespace lockstep::ops::detail {

// out = act(op(a)·op(b) + bias); bias may be undefined. Shapes are checked by the caller.
void gemm_into(const Tensor& a, const Tensor& b, const Tensor& bias, bool transpose_a,
               bool transpose_b, FusedActivation act, const Tensor& out);

// Whether a float32 x [m, k] · kernel [k, n] (+ bias) computed in linear's row blocks gives the
// bits of the whole call (checked once per shape, on random operands). A run that wants more safe
// points (task_wants_fine_checks) computes linear's long forward matmuls in row blocks, with a
// cancellation check between them, only where it does.
bool row_blocks_give_the_same_bits(int64_t m, int64_t k, int64_t n, bool with_bias);
// Whether that check has been made for the shape (a run of a task settles it for its backups).
bool row_blocks_checked(int64_t m, int64_t k, int64_t n, bool with_bias);

// float32 copy of a bfloat16 tensor (exact), or t itself when it is float32.
Tensor widen_to_f32(const Tensor& t);
// bfloat16 copy of a float32 tensor (round to nearest even).
Tensor narrow_to_bf16(const Tensor& t);

// True when an op on operands of `dtype` must compute in float32 kernels because oneDNN has no
// bfloat16 kernels here (ops/cpu_kernels.h): the op widens its bfloat16 operands, runs its
// float32 path and rounds its results back.
bool emulates_bf16(DType dtype);

// dz = dy ⊙ act'(·) where `saved` is the output y (relu, sigmoid, tanh) or the input z (gelu).
// dz may alias dy.
void activation_grad_into(FusedActivation act, const Tensor& dy, const Tensor& saved,
                          const Tensor& dz);

// out[j] = Σ_i x[i, j] for x [rows, cols] (bias gradients).
void column_sums_into(const Tensor& x, const Tensor& out);

// relu's gradient and the bias gradient in one pass: dz = dy ⊙ [y > 0] (dy, y [rows, cols] of one
// dtype; dz of dy's dtype, or float32 for bfloat16 dy: widened), dbias[j] = Σ_i dz[i, j] (float32,
// or bfloat16 rounded from a float32 sum). The same bits as activation_grad_into (or, for a float32
// dz of bfloat16 operands, linear's widening relu gradient) followed by column_sums_into. Returns
// false, doing nothing, for operands it does not cover.
bool relu_bias_grad_into(const Tensor& dy, const Tensor& y, const Tensor& dz, const Tensor& dbias);

}  // namespace lockstep::ops::detail
