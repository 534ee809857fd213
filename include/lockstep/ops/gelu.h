#pragma once
// GELU's two forms (keras.activations.gelu(x, approximate)), forward and backward. Any shape;
// floating dtypes (float32 and bfloat16 run oneDNN's eltwise primitives, float64 a loop).
//
//   exact (approximate=False, Keras' default; ops::gelu_forward in activations.h)
//                y = x Φ(x) = ½ x (1 + erf(x / √2))
//                dx = dy · (Φ(x) + x φ(x)),             φ the standard normal density
//   tanh (approximate=True)
//                y = ½ x (1 + tanh u),   u = √(2/π) (x + 0.044715 x³)
//                dx = dy · (½ (1 + tanh u) + ½ x (1 − tanh² u) √(2/π) (1 + 3 · 0.044715 x²))
#include "lockstep/core/tensor.h"

namespace lockstep::ops {

Tensor gelu_tanh_forward(const Tensor& x);
// dy and x of one shape and dtype; returns dx like dy.
Tensor gelu_tanh_backward(const Tensor& dy, const Tensor& x);

}  // namespace lockstep::ops
