#pragma once
// Softmax over the last axis with a keep/drop mask (Keras' Softmax layer called with `mask`, the
// attention probabilities of MultiHeadAttention), forward and backward.
//
//   x [..., N];  mask broadcastable to x (NumPy rules, any dtype; nonzero keeps a position)
//   z = where(mask, x, −1e9)                  (Keras' large negative number)
//   y = softmax(z) over the last axis
//   dx = where(mask, y ⊙ (dy − Σ_j dy_j y_j), 0)
//
// A row that keeps at least one position gives the dropped ones probability 0 exactly. A row with
// every position dropped gets 1/N everywhere (what Keras computes in float32, where the −1e9 swamps
// the scores) and no gradient. An undefined mask keeps everything (plain softmax). Floating x:
// float32 and bfloat16 run oneDNN's softmax, float64 a loop; y has x's dtype.
#include "lockstep/core/tensor.h"

namespace lockstep::ops {

inline constexpr double kMaskedScore = -1e9;

Tensor masked_softmax_forward(const Tensor& x, const Tensor& mask);
// dy and y: x's shape and dtype; `mask` as given to the forward pass.
Tensor masked_softmax_backward(const Tensor& dy, const Tensor& y, const Tensor& mask);

}  // namespace lockstep::ops
