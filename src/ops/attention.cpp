#include "lockstep/ops/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <string>

#include "lockstep/core/cpu_dispatch.h"
#include "lockstep/ops/masked_softmax.h"

#include "batched_gemm.h"
#include "broadcast_mask.h"
#include "kernel_util.h"
#include "onednn.h"

namespace lockstep::ops {
namespace {

using detail::StridedBatch;

struct Dims {
  int64_t B, T, S, H, Dk, Dv;
};

std::atomic<int64_t>& block_override() {
  static std::atomic<int64_t> v{0};
  return v;
}

Dims check(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  detail::check_floating(q, op, "query");
  detail::check_floating(k, op, "key");
  detail::check_floating(v, op, "value");
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype()) {
    throw InvalidArgument(std::string(op) +
                          ": expected query, key and value of one dtype. Received: query " +
                          q.describe() + ", key " + k.describe() + ", value " + v.describe() + ".");
  }
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4) {
    throw InvalidArgument(std::string(op) +
                          ": expected query [B, T, H, Dk], key [B, S, H, Dk] and value [B, S, H, "
                          "Dv] (rank 4). Received: query " +
                          q.describe() + ", key " + k.describe() + ", value " + v.describe() + ".");
  }
  Dims d{q.dim(0), q.dim(1), k.dim(1), q.dim(2), q.dim(3), v.dim(3)};
  const bool ok = k.dim(0) == d.B && v.dim(0) == d.B && k.dim(2) == d.H && v.dim(2) == d.H &&
                  k.dim(3) == d.Dk && v.dim(1) == d.S;
  if (!ok) {
    throw InvalidArgument(std::string(op) +
                          ": expected query [B, T, H, Dk], key [B, S, H, Dk] and value [B, S, H, "
                          "Dv] with equal B, H, Dk and S. Received: query " +
                          q.describe() + ", key " + k.describe() + ", value " + v.describe() + ".");
  }
  return d;
}

// What forward and backward share for one call.
struct Plan {
  Dims d;
  DType dtype;  // the operands'
  DType acc;    // scores and probabilities: float32, or float64 for float64 operands
  double scale;
  bool causal;
  std::optional<detail::BroadcastMask> mask;  // against [B, H, T, S]
  int64_t block;                              // examples per block
};

Plan make_plan(const Dims& d, DType dtype, const AttentionOptions& o, const char* op) {
  if (o.scale < 0 || !std::isfinite(o.scale)) {
    throw InvalidArgument(std::string(op) + ": expected scale >= 0 (0: 1/sqrt(Dk)). Received: " +
                          std::to_string(o.scale) + ".");
  }
  Plan p{d,
         dtype,
         dtype == DType::float64 ? DType::float64 : DType::float32,
         o.scale > 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(1, d.Dk))),
         o.is_causal,
         std::nullopt,
         attention_block_examples(d.H, d.T, d.S)};
  if (o.mask.defined()) p.mask = detail::broadcast_mask(o.mask, Shape{d.B, d.H, d.T, d.S}, op);
  return p;
}

// Examples [b0, b0 + n) of a [B, rows, H, D] tensor as n × H matrices [rows, D] (strided views of
// the heads; nothing is copied).
StridedBatch heads(const Tensor& t, int64_t b0, int64_t n, int64_t H) {
  const int64_t rows = t.dim(1), D = t.dim(3);
  const auto* base = static_cast<const char*>(t.raw_data());
  return {.data = base + static_cast<size_t>(b0 * rows * H * D) * dtype_size(t.dtype()),
          .dtype = t.dtype(),
          .b0 = n,
          .b1 = H,
          .rows = rows,
          .cols = D,
          .s0 = rows * H * D,
          .s1 = D,
          .rs = H * D,
          .cs = 1};
}

// A dense [n, H, rows, cols] buffer as n × H matrices.
StridedBatch dense(const Tensor& t, int64_t n, int64_t H, int64_t rows, int64_t cols) {
  return {.data = t.raw_data(),
          .dtype = t.dtype(),
          .b0 = n,
          .b1 = H,
          .rows = rows,
          .cols = cols,
          .s0 = H * rows * cols,
          .s1 = rows * cols,
          .rs = cols,
          .cs = 1};
}

bool masking(const Plan& p) {
  return p.causal || p.mask.has_value();
}

// Writes `value` at the dropped positions of the block's rows [n, H, T, S] (examples b0...).
template <typename A>
void set_dropped(A* rows, const Plan& p, int64_t b0, int64_t n, A value) {
  const Dims& d = p.d;
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      for (int64_t t = 0; t < d.T; ++t) {
        A* row = rows + ((b * d.H + h) * d.T + t) * d.S;
        if (p.causal) {
          for (int64_t s = t + 1; s < d.S; ++s) row[s] = value;
        }
        if (p.mask) {
          const auto& st = p.mask->strides;
          const uint8_t* keep = p.mask->data() + (b0 + b) * st[0] + h * st[1] + t * st[2];
          const int64_t ss = st[3];
          for (int64_t s = 0; s < d.S; ++s) {
            if (!keep[s * ss]) row[s] = value;
          }
        }
      }
    }
  }
}

// Row softmax in place over [rows, n].
void softmax_rows(const Tensor& scores, int64_t rows, int64_t n) {
  if (scores.dtype() == DType::float64) {
    double* x = scores.data<double>();
    for (int64_t r = 0; r < rows; ++r, x += n) {
      double m = x[0];
      for (int64_t i = 1; i < n; ++i) m = std::max(m, x[i]);
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - m));
      for (int64_t i = 0; i < n; ++i) x[i] /= sum;
    }
    return;
  }
  onednn::Key key("attention_softmax");
  key.add(rows).add(n);
  auto& prim = onednn::cached<onednn::Primitive>(key, [&] {
    auto md = onednn::plain_desc(dnnl::memory::dims{rows, n}, DType::float32);
    dnnl::softmax_forward::primitive_desc pd(
        dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, md, 1), onednn::engine());
    return onednn::Primitive(dnnl::softmax_forward(pd), {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}});
  });
  prim.execute({{DNNL_ARG_SRC, scores.raw_data()}, {DNNL_ARG_DST, scores.raw_data()}});
}

// dP <- P ⊙ (dP − rowsum(P ⊙ dP)) over [rows, n], in float32 with 16 partial sums (the order the
// AVX-512 clone vectorises); float64 exactly as written.
LOCKSTEP_TARGET_CLONES void softmax_grad_rows_f32(const float* __restrict p, float* __restrict dp,
                                                  int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r, p += n, dp += n) {
    float part[16] = {};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      for (int j = 0; j < 16; ++j) part[j] += p[i + j] * dp[i + j];
    }
    float dot = 0;
    for (; i < n; ++i) dot += p[i] * dp[i];
    for (int j = 0; j < 16; ++j) dot += part[j];
    for (i = 0; i < n; ++i) dp[i] = p[i] * (dp[i] - dot);
  }
}

void softmax_grad_rows(const Tensor& probs, const Tensor& dprobs, int64_t rows, int64_t n) {
  if (probs.dtype() == DType::float64) {
    const double* p = probs.data<double>();
    double* dp = dprobs.data<double>();
    for (int64_t r = 0; r < rows; ++r, p += n, dp += n) {
      double dot = 0;
      for (int64_t i = 0; i < n; ++i) dot += p[i] * dp[i];
      for (int64_t i = 0; i < n; ++i) dp[i] = p[i] * (dp[i] - dot);
    }
    return;
  }
  softmax_grad_rows_f32(probs.data<float>(), dprobs.data<float>(), rows, n);
}

// The block's float32 (or float64) buffer in the operands' dtype: itself, or rounded to bfloat16
// into `low`.
const Tensor& in_operand_dtype(const Tensor& acc, const Tensor& low, int64_t count) {
  if (!low.defined()) return acc;
  float_to_bfloat16(acc.data<float>(), low.data<bfloat16>(), static_cast<size_t>(count));
  return low;
}

// Scores and probabilities of examples [b0, b0 + n) into `probs` ([n, H, T, S], acc dtype).
void block_probabilities(const Plan& p, const Tensor& q, const Tensor& k, int64_t b0, int64_t n,
                         const Tensor& probs) {
  const Dims& d = p.d;
  detail::batched_gemm(heads(q, b0, n, d.H), heads(k, b0, n, d.H).t(),
                       dense(probs, n, d.H, d.T, d.S), p.scale);
  if (masking(p)) {
    if (p.acc == DType::float64) {
      set_dropped(probs.data<double>(), p, b0, n, kMaskedScore);
    } else {
      set_dropped(probs.data<float>(), p, b0, n, static_cast<float>(kMaskedScore));
    }
  }
  softmax_rows(probs, n * d.H * d.T, d.S);
}

}  // namespace

int64_t attention_block_examples(int64_t heads, int64_t t, int64_t s) {
  if (int64_t forced = block_override().load(); forced > 0) return forced;
  // About 192 KiB of float32 scores per block: the scores, their gradient and the bfloat16 copies
  // stay in the core's L2 between the matmul that writes them and the ones that read them.
  const int64_t per_example = std::max<int64_t>(1, heads * t * s * 4);
  return std::max<int64_t>(1, (192 * 1024) / per_example);
}

void set_attention_block_examples(int64_t examples) {
  block_override().store(std::max<int64_t>(0, examples));
}

Tensor dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                             const AttentionOptions& options) {
  const char* op = "dot_product_attention";
  const Dims d = check(query, key, value, op);
  const Plan p = make_plan(d, query.dtype(), options, op);
  Tensor out({d.B, d.T, d.H, d.Dv}, query.dtype());
  if (out.num_elements() == 0) return out;
  if (d.S == 0) return Tensor::zeros(out.shape(), out.dtype());  // no keys: empty sums
  const int64_t block = std::min(p.block, d.B);
  Tensor probs({block * d.H * d.T * d.S}, p.acc);
  Tensor low = p.dtype == DType::bfloat16 ? Tensor(probs.shape(), DType::bfloat16) : Tensor();
  for (int64_t b0 = 0; b0 < d.B; b0 += block) {
    const int64_t n = std::min(block, d.B - b0);
    block_probabilities(p, query, key, b0, n, probs);
    const Tensor& pv = in_operand_dtype(probs, low, n * d.H * d.T * d.S);
    detail::batched_gemm(dense(pv, n, d.H, d.T, d.S), heads(value, b0, n, d.H),
                         heads(out, b0, n, d.H));
  }
  return out;
}

AttentionGrads dot_product_attention_backward(const Tensor& doutput, const Tensor& query,
                                              const Tensor& key, const Tensor& value,
                                              const AttentionOptions& options, bool need_dquery,
                                              bool need_dkey, bool need_dvalue) {
  const char* op = "dot_product_attention_backward";
  const Dims d = check(query, key, value, op);
  detail::check_defined(doutput, op, "doutput");
  const Shape expected{d.B, d.T, d.H, d.Dv};
  if (!(doutput.shape() == expected) || doutput.dtype() != query.dtype()) {
    throw InvalidArgument(std::string(op) + ": expected doutput of shape " + expected.to_string() +
                          " and dtype " + std::string(dtype_name(query.dtype())) +
                          ". Received: " + doutput.describe() + ".");
  }
  const Plan p = make_plan(d, query.dtype(), options, op);
  AttentionGrads g;
  if (d.B * d.H * d.T * d.S == 0) {  // no scores: nothing depends on the inputs
    if (need_dquery) g.dquery = Tensor::zeros(query.shape(), query.dtype());
    if (need_dkey) g.dkey = Tensor::zeros(key.shape(), key.dtype());
    if (need_dvalue) g.dvalue = Tensor::zeros(value.shape(), value.dtype());
    return g;
  }
  // Every block writes its examples' rows of each gradient in full.
  if (need_dquery) g.dquery = Tensor(query.shape(), query.dtype());
  if (need_dkey) g.dkey = Tensor(key.shape(), key.dtype());
  if (need_dvalue) g.dvalue = Tensor(value.shape(), value.dtype());
  const int64_t block = std::min(p.block, d.B);
  const int64_t block_elems = block * d.H * d.T * d.S;
  Tensor probs({block_elems}, p.acc), dprobs({block_elems}, p.acc);
  const bool bf16 = p.dtype == DType::bfloat16;
  Tensor low_p = bf16 ? Tensor({block_elems}, DType::bfloat16) : Tensor();
  Tensor low_ds = bf16 ? Tensor({block_elems}, DType::bfloat16) : Tensor();
  for (int64_t b0 = 0; b0 < d.B; b0 += block) {
    const int64_t n = std::min(block, d.B - b0);
    const int64_t count = n * d.H * d.T * d.S;
    block_probabilities(p, query, key, b0, n, probs);
    if (need_dvalue) {
      const Tensor& pv = in_operand_dtype(probs, low_p, count);
      detail::batched_gemm(dense(pv, n, d.H, d.T, d.S).t(), heads(doutput, b0, n, d.H),
                           heads(g.dvalue, b0, n, d.H));
    }
    if (!need_dquery && !need_dkey) continue;
    detail::batched_gemm(heads(doutput, b0, n, d.H), heads(value, b0, n, d.H).t(),
                         dense(dprobs, n, d.H, d.T, d.S));
    softmax_grad_rows(probs, dprobs, n * d.H * d.T, d.S);
    if (masking(p)) {
      if (p.acc == DType::float64) {
        set_dropped(dprobs.data<double>(), p, b0, n, 0.0);
      } else {
        set_dropped(dprobs.data<float>(), p, b0, n, 0.0f);
      }
    }
    const Tensor& ds = in_operand_dtype(dprobs, low_ds, count);
    if (need_dquery) {
      detail::batched_gemm(dense(ds, n, d.H, d.T, d.S), heads(key, b0, n, d.H),
                           heads(g.dquery, b0, n, d.H), p.scale);
    }
    if (need_dkey) {
      detail::batched_gemm(dense(ds, n, d.H, d.T, d.S).t(), heads(query, b0, n, d.H),
                           heads(g.dkey, b0, n, d.H), p.scale);
    }
  }
  return g;
}

}  // namespace lockstep::ops
