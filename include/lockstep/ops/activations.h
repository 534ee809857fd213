#pragma once
// Unary elementwise ops, forward and backward. Any shape; floating dtypes.
//
// Forward runs oneDNN's eltwise primitive for float32 / bfloat16 and a loop for float64. Each
// backward takes the upstream gradient dy and what the derivative needs (the input x or the
// output y, as named), and returns dx = dy ⊙ f'(x), same shape and dtype as dy:
//
//   neg      y = −x                     dx = −dy
//   exp      y = eˣ                     dx = dy · y
//   log      y = ln x                   dx = dy / x
//   sqrt     y = √x                     dx = dy / (2y)
//   square   y = x²                     dx = 2x · dy
//   relu     y = max(x, 0)              dx = dy · [y > 0]
//   sigmoid  y = 1 / (1 + e⁻ˣ)          dx = dy · y(1 − y)
//   tanh     y = tanh x                 dx = dy · (1 − y²)
//   gelu     y = x Φ(x) (exact, erf)    dx = dy · (Φ(x) + x φ(x)),  φ the standard normal pdf
#include "lockstep/core/tensor.h"

namespace lockstep::ops {

Tensor neg_forward(const Tensor& x);
Tensor neg_backward(const Tensor& dy);
Tensor exp_forward(const Tensor& x);
Tensor exp_backward(const Tensor& dy, const Tensor& y);
Tensor log_forward(const Tensor& x);
Tensor log_backward(const Tensor& dy, const Tensor& x);
Tensor sqrt_forward(const Tensor& x);
Tensor sqrt_backward(const Tensor& dy, const Tensor& y);
Tensor square_forward(const Tensor& x);
Tensor square_backward(const Tensor& dy, const Tensor& x);
Tensor relu_forward(const Tensor& x);
Tensor relu_backward(const Tensor& dy, const Tensor& y);
Tensor sigmoid_forward(const Tensor& x);
Tensor sigmoid_backward(const Tensor& dy, const Tensor& y);
Tensor tanh_forward(const Tensor& x);
Tensor tanh_backward(const Tensor& dy, const Tensor& y);
Tensor gelu_forward(const Tensor& x);
Tensor gelu_backward(const Tensor& dy, const Tensor& x);
// mixed_bfloat16's float32 form (ops/bfloat16_values.h), float32 x: gelu's output rounded to
// bfloat16 values as it is produced, a cache-sized chunk at a time (and marked), and the gradient
// through it of dy read rounded the same way: the bits of gelu followed by to_bfloat16_values,
// forward and backward, without a pass of their own over the output or its gradient.
Tensor gelu_to_bfloat16_values_forward(const Tensor& x);
Tensor gelu_to_bfloat16_values_backward(const Tensor& dy, const Tensor& x);

}  // namespace lockstep::ops
