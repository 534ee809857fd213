#pragma once
// Differentiable ops for transformer layers (MultiHeadAttention, GELU MLPs): each runs the forward
// kernel of lockstep/ops/ and, when a recording tape tracks an input, records the matching
// backward kernel. Shapes, dtypes and formulas are documented with the kernels:
//   batch_matmul           ops/batch_matmul.h     a [..., M, K] · b [..., K, N] per batch index
//   masked_softmax         ops/masked_softmax.h   softmax over the last axis, dropped positions 0
//   gelu_tanh              ops/gelu.h             tanh-approximated GELU (exact: gelu, functions.h)
//   dot_product_attention  ops/attention.h        fused multi-head scaled dot-product attention
// Masks are constants (never differentiated).
#include "lockstep/core/tensor.h"
#include "lockstep/ops/attention.h"

namespace lockstep {

Tensor batch_matmul(const Tensor& a, const Tensor& b, bool transpose_a = false,
                    bool transpose_b = false);
Tensor masked_softmax(const Tensor& x, const Tensor& mask);
Tensor gelu_tanh(const Tensor& x);
// query [B, T, H, Dk], key [B, S, H, Dk], value [B, S, H, Dv] -> [B, T, H, Dv]
Tensor dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                             const ops::AttentionOptions& options = {});

}  // namespace lockstep
