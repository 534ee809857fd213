#pragma once
// Differentiable ops (as tf.matmul, tf.nn.relu, ... are): each computes its result with the ops
// layer's kernel (lockstep::relu calls ops::relu_forward) and, when a recording tape tracks one of
// its inputs, records a backward function that calls the matching ops::*_backward kernel. A raw
// kernel never has the name of a differentiable op, so code that means relu cannot call the
// kernel and lose the gradient (tests/layering/compile_fail checks it). Shapes, dtypes and
// formulas are documented with the kernels in lockstep/ops/*.h; losses are in
// lockstep/autodiff/losses.h.
//
// Core's Tensor::reshape / slice are views the tape does not see: use lockstep::reshape /
// flatten below inside differentiated code.
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/ops/linear.h"
#include "lockstep/ops/shape_ops.h"

namespace lockstep {

// op(a)·op(b), see ops/matmul.h.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);
// act(x·kernel + bias) (Keras Dense), see ops/linear.h; bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& kernel, const Tensor& bias = Tensor(),
              ops::FusedActivation activation = ops::FusedActivation::none);
// The weights as the matmul multiplies them, when that differs from the tensors the gradient is
// for: a mixed_bfloat16 layer multiplies its float32 variables as bfloat16 values (their rounded
// float32 copies or bfloat16 casts). The gradients go to `kernel` / `bias`: the bias's in its
// dtype; the kernel's too, unless `bfloat16_values` says the kernel is multiplied as bfloat16
// values: then its gradient is theirs — the product's gradient rounded to bfloat16, as
// TensorFlow's cast and PyTorch's autocast give it — written as bfloat16 into a bfloat16
// destination (GradientTape::gradient), else widened exactly to the kernel's dtype.
// kernel_layout: the kernel is a bfloat16 one in that layout (ops::linear_paired_into), which only
// the product reads: for an x whose gradient no tape wants (a model's first layer).
struct LinearOperands {
  Tensor kernel, bias;
  bool bfloat16_values = false;
  const PairedRowsLayout* kernel_layout = nullptr;
};
// linear() multiplying `multiplied` instead of kernel / bias, into an output of dtype `out`
// (x's dtype, or float32 for a bfloat16 x). gelu_to_bfloat16_values (float32 out, gelu):
// mixed_bfloat16's float32 form, the output rounded as the gelu produces it and its gradient read
// rounded (ops::gelu_to_bfloat16_values_*): the bits of linear() followed by to_bfloat16_values.
Tensor linear(const Tensor& x, const Tensor& kernel, const Tensor& bias,
              ops::FusedActivation activation, const LinearOperands& multiplied, DType out,
              bool gelu_to_bfloat16_values = false);
// mixed_bfloat16's float32 form: linear() of float32 x, kernel and bias, its output rounded to
// bfloat16 values as the matmul writes it and its gradient read rounded
// (ops::linear_to_bfloat16_values_forward): the bits of linear() followed by to_bfloat16_values.
Tensor linear_to_bfloat16_values(const Tensor& x, const Tensor& kernel,
                                 const Tensor& bias = Tensor());
// x[..., j] + bias[j].
Tensor bias_add(const Tensor& x, const Tensor& bias);

// Broadcasting binary ops (ops/elementwise.h).
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);

// Unary ops (ops/activations.h).
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor gelu(const Tensor& x);

// Along `axis` (ops/softmax.h).
Tensor softmax(const Tensor& x, int axis = -1);
Tensor log_softmax(const Tensor& x, int axis = -1);

// Reductions (ops/reduce.h); empty `axes` reduces every dimension.
Tensor reduce_sum(const Tensor& x, const std::vector<int>& axes = {}, bool keepdims = false);
Tensor reduce_mean(const Tensor& x, const std::vector<int>& axes = {}, bool keepdims = false);
Tensor reduce_max(const Tensor& x, const std::vector<int>& axes = {}, bool keepdims = false);

// Shape ops and casts (ops/shape_ops.h).
Tensor cast(const Tensor& x, DType dtype);
// float32 rounded to bfloat16 values, kept float32; gradient: the identity (ops/shape_ops.h).
Tensor round_to_bfloat16(const Tensor& x);
// cast(x, bfloat16) (a bfloat16 `rounded`) or round_to_bfloat16(x) (a float32 one) for a float32
// x whose result the caller already holds in `rounded` (a copy kept current beside a variable:
// mixed_precision::bfloat16_weights): recorded as that op, with its gradient, on a new handle of
// rounded's storage, without converting x again. The caller vouches that rounded is x's rounding.
Tensor rounded_as_recorded(const Tensor& x, const Tensor& rounded);
// float32 rounded to bfloat16 values, kept float32 and marked (Tensor::holds_bfloat16_values);
// gradient: rounded the same way, as a cast to bfloat16 and back would give it
// (ops/bfloat16_values.h). relu_to_bfloat16_values is relu of it, add_to_bfloat16_values the sum
// of two tensors of one shape, in one pass each way (round_inputs: of their roundings).
// reuse_sole_handle: x is a fresh result nobody else may read; rounded in place if nothing saved
// it.
Tensor to_bfloat16_values(const Tensor& x, bool reuse_sole_handle = false);
Tensor relu_to_bfloat16_values(const Tensor& x);
Tensor add_to_bfloat16_values(const Tensor& a, const Tensor& b, bool round_inputs = false);
Tensor concat(const std::vector<Tensor>& xs, int axis = 0);
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, const std::vector<int>& perm = {});
Tensor flatten(const Tensor& x);

// Not differentiable (integer results / inputs), so nothing to record: the kernels themselves.
using ops::argmax;
using ops::one_hot;

}  // namespace lockstep
