#pragma once
// The fully connected layer's kernel (Keras Dense layout), forward and backward.
//
//   x: [batch, in], kernel: [in, out], bias: [out] (optional)
//   z = x · kernel + bias,   y = act(z): [batch, out]
//
// Forward is one oneDNN matmul with the bias and the activation fused as post-ops (float32 /
// bfloat16; float64 runs loops). Backward:
//   dz = dy ⊙ act'(·)          relu: [y > 0], sigmoid: y(1 − y), tanh: 1 − y², from the saved
//                              output y; gelu needs the pre-activation z (act'(z) = Φ(z) + z φ(z))
//   dkernel = xᵀ · dz,  dbias = Σ_batch dz,  dx = dz · kernelᵀ
// The first layer's dx is not needed: skip it with need_dx = false.
#include "lockstep/core/paired_rows_layout.h"
#include "lockstep/core/tensor.h"

namespace lockstep::ops {

// The activation the kernel applies to x · kernel + bias in the same oneDNN call (a post-op). gelu
// is the exact (erf) form, Keras' default (approximate=False).
enum class FusedActivation { none, relu, sigmoid, tanh, gelu };
const char* activation_name(FusedActivation act);

// `bias` may be undefined (no bias). For bfloat16 x and kernel, bias may be bfloat16 or float32.
Tensor linear_forward(const Tensor& x, const Tensor& kernel, const Tensor& bias,
                      FusedActivation activation = FusedActivation::none);
// Writes into `y` ([batch, out], x's dtype, or float32 for a bfloat16 x: the matmul then computes
// in float32 and does not round its result). A bfloat16 x may also meet a float32 kernel and bias
// (holding bfloat16 values under mixed_bfloat16, or a float32 layer's own weights).
void linear_into(const Tensor& x, const Tensor& kernel, const Tensor& bias,
                 FusedActivation activation, const Tensor& y);

// The layout oneDNN's bfloat16 kernel wants the kernel in for a [batch, in] · [in, out] product
// here (with a bias when has_bias), when it is a paired-rows one (lockstep/core/
// paired_rows_layout.h) — a kernel handed over that way is not copied into it on every call — or
// nullptr: no bfloat16 kernels, gelu (not fused), or another layout. The layout lives as long as
// the process, and equal layouts are the same object.
const PairedRowsLayout* bf16_kernel_layout(int64_t batch, int64_t in, int64_t out, bool has_bias,
                                           FusedActivation activation);
// linear_into for a bfloat16 x and a bfloat16 kernel in `layout` (from bf16_kernel_layout; a 1-D
// tensor of layout.size elements, zero where the layout pads), into a bfloat16 y: the same values
// as the kernel in its plain layout would give. No gelu.
void linear_paired_into(const Tensor& x, const Tensor& kernel, const PairedRowsLayout& layout,
                        const Tensor& bias, FusedActivation activation, const Tensor& y);

// mixed_bfloat16's float32 form (keras/layer.h): float32 x · kernel + bias rounded to bfloat16
// values and marked (Tensor::holds_bfloat16_values), a cache-sized block of rows at a time right
// after the matmul writes it: the bits of linear_forward followed by to_bfloat16_values, without a
// pass of its own over the output.
Tensor linear_to_bfloat16_values_forward(const Tensor& x, const Tensor& kernel, const Tensor& bias);
// The same for a gelu layer: z = x · kernel + bias (float32, which gelu's gradient reads) and
// y = gelu(z) (exact form) rounded to bfloat16 values and marked, a block of rows at a time, the
// gelu and the rounding while the block of z is in the core's L2: the bits of linear_forward,
// gelu_forward and to_bfloat16_values.
struct LinearGeluResult {
  Tensor z, y;
};
LinearGeluResult linear_gelu_to_bfloat16_values_forward(const Tensor& x, const Tensor& kernel,
                                                        const Tensor& bias);

struct LinearGrads {
  Tensor dx, dkernel, dbias;
};
// `y` is linear's output; `pre_activation` (z) is required for gelu only. Undefined grads for
// what was not requested (and dbias when need_dbias is false).
LinearGrads linear_backward(const Tensor& dy, const Tensor& x, const Tensor& kernel,
                            const Tensor& y, FusedActivation activation, bool need_dx = true,
                            bool need_dkernel = true, bool need_dbias = true,
                            const Tensor& pre_activation = Tensor());
// Writes into the caller's buffers; an undefined output is skipped. dkernel has kernel's shape
// and dtype (float32 allowed for bfloat16 operands), dbias [out], dx x's shape. dy has y's dtype:
// x's, or float32 for a bfloat16 x with a float32 kernel and a float32 y.
void linear_backward_into(const Tensor& dy, const Tensor& x, const Tensor& kernel, const Tensor& y,
                          FusedActivation activation, const Tensor& dx, const Tensor& dkernel,
                          const Tensor& dbias, const Tensor& pre_activation = Tensor());

}  // namespace lockstep::ops
