#pragma once
// Scaled dot-product attention over heads (keras.ops.dot_product_attention's layout), forward and
// backward, fused: scores, softmax and the weighted sum of the values for a few examples at a
// time, never the whole batch's [B, H, T, S] probabilities.
//
//   query [B, T, H, Dk],  key [B, S, H, Dk],  value [B, S, H, Dv]  ->  output [B, T, H, Dv]
//   scores[b, h, t, s] = scale · Σ_d query[b, t, h, d] · key[b, s, h, d]
//   probs[b, h, t, :]  = masked_softmax(scores[b, h, t, :], keep[b, h, t, :])
//   (ops/masked_softmax.h) output[b, t, h, :] = Σ_s probs[b, h, t, s] · value[b, s, h, :]
// keep = mask (broadcast to [B, H, T, S], NumPy rules; nonzero keeps) and, with is_causal, s <= t
// (Keras' causal mask: a lower-triangular [T, S] matrix). A row that keeps nothing attends to every
// position equally (weights 1/S) and passes no gradient to the scores.
//
// Backward, with P = probs and dP = dO · Vᵀ (per example and head):
//   dV = Pᵀ · dO,   dScores = P ⊙ (dP − rowsum(P ⊙ dP)) (0 where dropped),
//   dQ = scale · dScores · K,   dK = scale · dScoresᵀ · Q
// The backward pass recomputes the scores and probabilities from query and key instead of keeping
// them from the forward pass (they are cheaper to recompute than to store and reload).
//
// dtypes: query, key and value share one. float32 and bfloat16 multiply in loops written for a
// head's few dozen rows (src/ops/attention.cpp; bfloat16 operands read as their float32 values:
// their products are exact, and the sums accumulate in float32 as a bfloat16 matmul's do); scores,
// softmax and its gradient are float32 either way (Keras keeps softmax in float32 under mixed
// precision), rounded to bfloat16 values only to multiply the values (P) and the keys and queries
// (dScores). float64 runs plain loops (gradient checks). The output and the gradients have the
// inputs' dtype (bfloat16: one rounding of the float32 result).
#include "lockstep/core/tensor.h"

namespace lockstep::ops {

struct AttentionOptions {
  // Undefined, or a tensor broadcastable to [B, H, T, S] (e.g. Keras' attention_mask [B, T, S]
  // reshaped to [B, 1, T, S], or a [T, S] pattern shared by every example).
  Tensor mask;
  bool is_causal = false;
  // 0 means 1 / sqrt(Dk).
  double scale = 0.0;
  // mixed_bfloat16's float32 form (keras/layer.h), for float32 query, key and value: they and
  // the output's gradient are read as their bfloat16 roundings (block by block, unless already
  // marked as holding bfloat16 values), the output and the gradients of query, key and value are
  // stored rounded to bfloat16 values and marked (Tensor::holds_bfloat16_values): the bits of
  // to_bfloat16_values on the inputs, the op, and to_bfloat16_values on its output.
  bool bfloat16_values = false;
};

Tensor dot_product_attention_forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const AttentionOptions& options = {});

struct AttentionGrads {
  Tensor dquery, dkey, dvalue;  // undefined when not requested
};
AttentionGrads dot_product_attention_backward(const Tensor& doutput, const Tensor& query,
                                              const Tensor& key, const Tensor& value,
                                              const AttentionOptions& options = {},
                                              bool need_dquery = true, bool need_dkey = true,
                                              bool need_dvalue = true);

// Examples per block of the fused kernels (the block's float32 scores stay in the core's cache),
// for [T, S] scores of `heads` heads. Exposed for benchmarks; set_attention_block_examples(0)
// restores the automatic choice.
int64_t attention_block_examples(int64_t heads, int64_t t, int64_t s);
void set_attention_block_examples(int64_t examples);

}  // namespace lockstep::ops
