#include "lockstep/keras/layers/attention.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/transformer_functions.h"
#include "lockstep/core/check.h"

namespace lockstep::keras::layers {

namespace {

std::string describe(const std::vector<Shape>& shapes) {
  std::string s = "[";
  for (size_t i = 0; i < shapes.size(); ++i) s += (i ? ", " : "") + shapes[i].to_string();
  return s + "]";
}

// One keep/drop byte per (example or 1, 1, t, s): the attention mask [B, T, S] or [T, S] and,
// with `causal`, s <= t. Undefined when nothing is masked.
Tensor combined_keep(const Tensor& mask, bool causal, int64_t B, int64_t T, int64_t S) {
  if (!mask.defined() && !causal) return Tensor();
  const int64_t n = mask.defined() && mask.rank() == 3 ? B : 1;
  Tensor keep({n, 1, T, S}, DType::uint8);
  uint8_t* out = keep.data<uint8_t>();
  const Tensor m = mask.defined() ? mask.to(DType::float64) : Tensor();
  const double* mv = m.defined() ? m.data<double>() : nullptr;
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t s = 0; s < S; ++s) {
        const int64_t i = (b * T + t) * S + s;
        bool kept = !causal || s <= t;
        if (mv) kept = kept && mv[i] != 0.0;
        out[i] = kept ? 1 : 0;
      }
    }
  }
  return keep;
}

}  // namespace

MultiHeadAttention::MultiHeadAttention(MultiHeadAttentionOptions options)
    : LayerImpl(options.name, "multi_head_attention", options.dtype),
      options_(std::move(options)),
      value_dim_(options_.value_dim > 0 ? options_.value_dim : options_.key_dim) {
  const auto fail = [&](const std::string& what) {
    throw InvalidArgument("MultiHeadAttention: expected " + what + ".");
  };
  if (options_.num_heads <= 0) {
    fail("num_heads > 0. Received: num_heads=" + std::to_string(options_.num_heads));
  }
  if (options_.key_dim <= 0) {
    fail("key_dim > 0. Received: key_dim=" + std::to_string(options_.key_dim));
  }
  if (options_.value_dim < 0) {
    fail("value_dim > 0 (or 0 for key_dim). Received: value_dim=" +
         std::to_string(options_.value_dim));
  }
  if (options_.output_shape < 0) {
    fail("output_shape > 0 (or 0 for the query's last dimension). Received: output_shape=" +
         std::to_string(options_.output_shape));
  }
  if (!(options_.dropout >= 0 && options_.dropout < 1)) {
    fail("0 <= dropout < 1. Received: dropout=" + std::to_string(options_.dropout));
  }
  initializers::get(options_.kernel_initializer);
  initializers::get(options_.bias_initializer);
  if (options_.dropout > 0) {
    // Named after this layer so that it takes no automatic "dropout" name from the user's layers.
    dropout_ = std::make_shared<Dropout>(DropoutOptions{
        .rate = options_.dropout, .seed = options_.seed, .name = name() + "_dropout"});
  }
}

MultiHeadAttention::Shapes MultiHeadAttention::split_shapes(const std::vector<Shape>& s) const {
  LOCKSTEP_CHECK(!s.empty() && s.size() <= 4, "MultiHeadAttention '", name(),
                 "' expects [query], [query, value], [query, value, key] or [query, value, key, "
                 "attention_mask]. Received ",
                 s.size(), " inputs.");
  Shapes out{s[0], s.size() > 1 ? s[1] : s[0], s.size() > 2 ? s[2] : (s.size() > 1 ? s[1] : s[0])};
  for (const Shape* x : {&out.query, &out.value, &out.key}) {
    LOCKSTEP_CHECK(
        !(x->rank() != 3), "MultiHeadAttention '", name(),
        "' expects query, value and key of rank 3 ([batch, sequence, features]). Received shapes ",
        describe(s), ".");
  }
  LOCKSTEP_CHECK(
      out.value[1] == out.key[1], "MultiHeadAttention '", name(),
      "': all dimensions of value and key except the last must be equal. Received: value ",
      out.value.to_string(), " and key ", out.key.to_string(), ".");
  return out;
}

void MultiHeadAttention::build(const std::vector<Shape>& input_shapes) {
  const Shapes s = split_shapes(input_shapes);
  const int64_t H = options_.num_heads, Kd = options_.key_dim, Vd = value_dim_;
  const int64_t E = options_.output_shape > 0 ? options_.output_shape : s.query[2];
  const DType vdt = variable_dtype();
  auto kernel_init = initializers::get(options_.kernel_initializer);
  auto bias_init = initializers::get(options_.bias_initializer);
  query_kernel_ = add_weight("query/kernel", {s.query[2], H, Kd}, *kernel_init, true, vdt);
  if (options_.use_bias) query_bias_ = add_weight("query/bias", {H, Kd}, *bias_init, true, vdt);
  key_kernel_ = add_weight("key/kernel", {s.key[2], H, Kd}, *kernel_init, true, vdt);
  if (options_.use_bias) key_bias_ = add_weight("key/bias", {H, Kd}, *bias_init, true, vdt);
  value_kernel_ = add_weight("value/kernel", {s.value[2], H, Vd}, *kernel_init, true, vdt);
  if (options_.use_bias) value_bias_ = add_weight("value/bias", {H, Vd}, *bias_init, true, vdt);
  output_kernel_ = add_weight("attention_output/kernel", {H, Vd, E}, *kernel_init, true, vdt);
  if (options_.use_bias) {
    output_bias_ = add_weight("attention_output/bias", {E}, *bias_init, true, vdt);
  }
}

std::vector<Shape> MultiHeadAttention::compute_output_shapes(
    const std::vector<Shape>& input_shapes) const {
  const Shapes s = split_shapes(input_shapes);
  const int64_t E = options_.output_shape > 0 ? options_.output_shape : s.query[2];
  return {s.query.with_dim(2, E)};
}

Tensor MultiHeadAttention::call(const std::vector<Tensor>& inputs, bool training) {
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  split_shapes(shapes);
  const Tensor& query = inputs[0];
  const Tensor& value = inputs.size() > 1 ? inputs[1] : inputs[0];
  const Tensor key = inputs.size() > 2 ? inputs[2] : Tensor();
  AttentionCallOptions o{.training = training};
  if (inputs.size() == 4) o.attention_mask = inputs[3];
  // Layer::operator()'s scope and finish_call give the output the policy's form.
  return attend_inner(query, value, key, o).output;
}

Tensor MultiHeadAttention::call(const Tensor& inputs, bool training) {
  return attend_inner(inputs, inputs, inputs, {.training = training}).output;
}

// x [B, N, D] · kernel [D, H, X] (+ bias [H, X]) -> [B, N, H, X]: one matmul over the B·N rows.
Tensor MultiHeadAttention::project(const Tensor& x, const Variable& kernel,
                                   const Variable& bias) const {
  const int64_t B = x.dim(0), N = x.dim(1), D = x.dim(2);
  const int64_t H = kernel.shape()[1], X = kernel.shape()[2];
  Tensor k = reshape(autocast(kernel), {D, H * X});
  Tensor b = options_.use_bias ? reshape(autocast(bias), {H * X}) : Tensor();
  // Stored as a bfloat16 op would store it (in the float32 form, rounded a block of rows at a
  // time as the matmul writes it: cheaper than a pass of its own, or the attention's rounding).
  const Tensor rows = reshape(x, {B * N, D});
  Tensor y = computes_bfloat16_in_float32() && rows.dtype() == DType::float32 &&
                     k.dtype() == DType::float32
                 ? linear_to_bfloat16_values(rows, k, b)
                 : linear(rows, k, b);
  return reshape(round_like_bfloat16(y), {B, N, H, X});
}

AttentionOutput MultiHeadAttention::attend(const Tensor& query_in, const Tensor& value_in,
                                           const Tensor& key_in, const AttentionCallOptions& o) {
  // A layer call like operator()'s: the output takes the policy's form (the scores stay float32).
  detail::LayerCallScope scope;
  AttentionOutput result = attend_inner(query_in, value_in, key_in, o);
  result.output = finish_call(std::move(result.output), scope);
  return result;
}

AttentionOutput MultiHeadAttention::attend_inner(const Tensor& query_in, const Tensor& value_in,
                                                 const Tensor& key_in,
                                                 const AttentionCallOptions& o) {
  const Tensor& key_or_value = key_in.defined() ? key_in : value_in;
  const std::vector<Shape> shapes{query_in.shape(), value_in.shape(), key_or_value.shape()};
  const Shapes s = split_shapes(shapes);
  if (!built()) {
    build(shapes);
    set_built();
  }
  const int64_t B = s.query[0], T = s.query[1], S = s.value[1];
  const bool dims_ok = s.value[0] == B && s.key[0] == B && s.query[2] == query_kernel_.shape()[0] &&
                       s.key[2] == key_kernel_.shape()[0] && s.value[2] == value_kernel_.shape()[0];
  LOCKSTEP_CHECK(
      dims_ok, "MultiHeadAttention '", name(), "' expects query [B, T, ", query_kernel_.shape()[0],
      "], value [B, S, ", value_kernel_.shape()[0], "] and key [B, S, ", key_kernel_.shape()[0],
      "] (the shapes it was built for, one batch size). Received shapes ", describe(shapes), ".");
  const Tensor& mask = o.attention_mask;
  if (mask.defined()) {
    const bool ok = (mask.rank() == 3 && mask.shape() == Shape{B, T, S}) ||
                    (mask.rank() == 2 && mask.shape() == Shape{T, S});
    LOCKSTEP_CHECK(ok, "MultiHeadAttention '", name(), "' expects an attention_mask of shape ",
                   Shape{B, T, S}.to_string(), " or ", Shape{T, S}.to_string(),
                   ". Received: ", mask.describe(), ".");
  }

  const bool use_dropout = dropout_ && o.training;
  const bool fused = !(use_dropout || o.return_attention_scores);
  const Tensor q = project(autocast(query_in), query_kernel_, query_bias_);
  const Tensor k = project(autocast(key_or_value), key_kernel_, key_bias_);
  const Tensor v = project(autocast(value_in), value_kernel_, value_bias_);
  AttentionOutput result;
  Tensor attended;  // [B, T, H, value_dim]
  if (!fused) {
    attended = unfused_attention(q, k, v, mask, o.use_causal_mask, o.training,
                                 o.return_attention_scores ? &result.scores : nullptr);
  } else {
    // The float32 form's kernel rounds the output and the gradients of q, k, v as it stores them.
    ops::AttentionOptions fused{.is_causal = o.use_causal_mask,
                                .scale = 1.0 / std::sqrt(static_cast<double>(options_.key_dim)),
                                .bfloat16_values = computes_bfloat16_in_float32()};
    // Keras expands a [B, T, S] mask over the heads; a [T, S] one broadcasts as it is.
    if (mask.defined()) fused.mask = mask.rank() == 3 ? mask.reshape({B, 1, T, S}) : mask;
    attended = dot_product_attention(q, k, v, fused);
  }
  const int64_t H = options_.num_heads, Vd = value_dim_, E = output_kernel_.shape()[2];
  Tensor wo = reshape(autocast(output_kernel_), {H * Vd, E});
  Tensor bo = options_.use_bias ? autocast(output_bias_) : Tensor();
  attended = round_like_bfloat16(attended);
  result.output = reshape(linear(reshape(attended, {B * T, H * Vd}), wo, bo), {B, T, E});
  return result;
}

// Keras' _compute_attention: scores, masked softmax, dropout, weighted sum, as separate steps.
Tensor MultiHeadAttention::unfused_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& mask, bool causal, bool training,
                                             Tensor* scores) {
  const int64_t B = q.dim(0), T = q.dim(1), S = k.dim(1);
  const DType compute = q.dtype();
  // Scores and softmax in float32 under mixed precision: bfloat16 products are exact in float32.
  const DType acc = compute == DType::float64 ? DType::float64 : DType::float32;
  const std::vector<int> heads_first{0, 2, 1, 3};
  Tensor qh = cast(transpose(q, heads_first), acc);  // [B, H, T, key_dim]
  Tensor kh = cast(transpose(k, heads_first), acc);  // [B, H, S, key_dim]
  Tensor vh = transpose(v, heads_first);             // [B, H, S, value_dim]
  qh = mul(qh, Tensor::scalar(1.0 / std::sqrt(static_cast<double>(options_.key_dim)), acc));
  Tensor probs =
      masked_softmax(batch_matmul(qh, kh, false, true), combined_keep(mask, causal, B, T, S));
  if (scores) *scores = probs;
  if (dropout_ && training) probs = dropout_->call(probs, true);
  Tensor attended = batch_matmul(cast(probs, compute), vh);  // [B, H, T, value_dim]
  return transpose(attended, heads_first);
}

nlohmann::json MultiHeadAttention::get_config() const {
  auto c = Layer::get_config();
  c["num_heads"] = options_.num_heads;
  c["key_dim"] = options_.key_dim;
  c["value_dim"] = value_dim_;
  c["dropout"] = options_.dropout;
  c["use_bias"] = options_.use_bias;
  c["output_shape"] =
      options_.output_shape > 0 ? nlohmann::json(options_.output_shape) : nlohmann::json(nullptr);
  c["attention_axes"] = nullptr;
  c["kernel_initializer"] = options_.kernel_initializer;
  c["bias_initializer"] = options_.bias_initializer;
  c["seed"] = options_.seed ? nlohmann::json(*options_.seed) : nlohmann::json(nullptr);
  c["dtype"] = dtype_policy().name();
  return c;
}

}  // namespace lockstep::keras::layers
