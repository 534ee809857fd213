#pragma once
// MultiHeadAttention (keras.layers.MultiHeadAttention), for inputs of rank 3:
//
//   query [B, T, Dq], value [B, S, Dv_in], key [B, S, Dk_in] (key defaults to value)
//   Q = query · Wq + bq     Wq [Dq, H, key_dim],      bq [H, key_dim]     -> [B, T, H, key_dim]
//   K = key   · Wk + bk     Wk [Dk_in, H, key_dim],   bk [H, key_dim]     -> [B, S, H, key_dim]
//   V = value · Wv + bv     Wv [Dv_in, H, value_dim], bv [H, value_dim]   -> [B, S, H, value_dim]
//   probs[b, h, t, :] = softmax over s of (Q[b, t, h] · K[b, s, h]) / sqrt(key_dim), masked
//   O[b, t, h, :] = Σ_s dropout(probs)[b, h, t, s] · V[b, s, h, :]
//   output = O · Wo + bo    Wo [H, value_dim, E], bo [E]                   -> [B, T, E]
// E = output_shape, or the query's last dimension when 0 (Keras' output_shape=None).
//
// Weights, in Keras' order and shapes (so that Keras weights load by name and shape):
//   query/kernel, query/bias, key/kernel, key/bias, value/kernel, value/bias,
//   attention_output/kernel, attention_output/bias     (biases only with use_bias)
// Kernels use the kernel initializer with Keras' fans for these ranks (glorot_uniform over
// [Dq, H, key_dim] has fan_in = Dq·H and fan_out = Dq·key_dim, as EinsumDense's kernels in Keras).
//
// Masks (Keras' attention_mask / use_causal_mask): a position (t, s) is attended when the mask is
// nonzero there and, with the causal mask, s <= t. The mask is [B, T, S] (per example; Keras'
// shape) or [T, S] (one pattern for every example); it is never differentiated. A query row that
// may attend to nothing gets equal weights on every key (what Keras computes in float32). Masked
// probabilities are 0.
//
// Calling it:
//   * as a layer, on [query], [query, value], [query, value, key] or
//     [query, value, key, attention_mask] (one input: self-attention, query = value = key) —
//     eagerly or in a functional graph: `auto y = mha({x, x});`
//   * with Keras' keyword arguments through attend(query, value, key, {...}), which can also return
//     the attention probabilities [B, H, T, S] (return_attention_scores).
//
// Computation: without dropout in training and without returned scores, the attention runs the
// fused kernel of ops/attention.h (a few examples' [H, T, S] at a time, never the batch's). With
// dropout (training) or returned scores it runs Keras' unfused steps (scores, masked softmax,
// dropout, weighted sum) through batch_matmul and masked_softmax.
//
// Mixed precision (dtype policy mixed_bfloat16): the projections and both attention products take
// bfloat16 operands; scores, softmax and its gradient stay float32 (the probabilities are rounded
// to bfloat16 only to multiply the values); returned scores are float32; the output is bfloat16.
//
// Not supported (Keras options): attention_axes other than the sequence axis (inputs of rank
// other than 3), output_shape of rank > 1, Keras masks propagated from Embedding(mask_zero) (pass
// attention_mask), flash_attention, regularizers and constraints.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/keras/layer.h"
#include "lockstep/keras/layers/core.h"

namespace lockstep::keras::layers {

struct MultiHeadAttentionOptions {
  int64_t num_heads = 0;
  int64_t key_dim = 0;
  int64_t value_dim = 0;  // 0: key_dim (Keras' value_dim=None)
  double dropout = 0.0;   // on the attention probabilities, in training
  bool use_bias = true;
  int64_t output_shape = 0;  // 0: the query's last dimension
  std::string kernel_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  std::optional<uint64_t> seed{};  // of the dropout masks
  std::string dtype = "";          // the dtype policy ("" = global)
  std::string name = "";
};

// Keras' call arguments besides the tensors.
struct AttentionCallOptions {
  Tensor attention_mask;  // undefined, [B, T, S] or [T, S]; nonzero = attend
  bool use_causal_mask = false;
  bool return_attention_scores = false;
  bool training = false;
};

struct AttentionOutput {
  Tensor output;  // [B, T, E]
  Tensor scores;  // [B, H, T, S] float32 probabilities, with return_attention_scores
};

class MultiHeadAttention : public LayerImpl<MultiHeadAttention> {
 public:
  explicit MultiHeadAttention(MultiHeadAttentionOptions options);
  std::string class_name() const override { return "MultiHeadAttention"; }
  bool accepts_multiple_inputs() const override { return true; }
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const std::vector<Tensor>& inputs, bool training) override;
  Tensor call(const Tensor& inputs, bool training) override;
  std::vector<Shape> compute_output_shapes(const std::vector<Shape>& input_shapes) const override;
  nlohmann::json get_config() const override;

  // Keras' layer(query, value, key=None, attention_mask=..., use_causal_mask=...,
  // return_attention_scores=..., training=...). Builds the layer on first use. `key` may be
  // undefined (then value).
  AttentionOutput attend(const Tensor& query, const Tensor& value, const Tensor& key = Tensor(),
                         const AttentionCallOptions& options = {});

  int64_t num_heads() const { return options_.num_heads; }
  int64_t key_dim() const { return options_.key_dim; }
  int64_t value_dim() const { return value_dim_; }
  const Variable& query_kernel() const { return query_kernel_; }
  const Variable& query_bias() const { return query_bias_; }
  const Variable& key_kernel() const { return key_kernel_; }
  const Variable& key_bias() const { return key_bias_; }
  const Variable& value_kernel() const { return value_kernel_; }
  const Variable& value_bias() const { return value_bias_; }
  const Variable& output_kernel() const { return output_kernel_; }
  const Variable& output_bias() const { return output_bias_; }

 private:
  struct Shapes {
    Shape query, value, key;
  };
  AttentionOutput attend_inner(const Tensor& query_in, const Tensor& value_in, const Tensor& key_in,
                               const AttentionCallOptions& o);
  Shapes split_shapes(const std::vector<Shape>& input_shapes) const;
  // In mixed_bfloat16's float32 form, the projection rounded to bfloat16 values.
  Tensor project(const Tensor& x, const Variable& kernel, const Variable& bias) const;
  Tensor unfused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                           bool causal, bool training, Tensor* scores);
  MultiHeadAttentionOptions options_;
  int64_t value_dim_;
  Variable query_kernel_, query_bias_, key_kernel_, key_bias_, value_kernel_, value_bias_;
  Variable output_kernel_, output_bias_;
  std::shared_ptr<Dropout> dropout_;  // Keras' _dropout_layer; only with dropout > 0
};

}  // namespace lockstep::keras::layers
