#include "lockstep/ops/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cpu_dispatch.h"
#include "core/lane_transpose.h"
#include "lockstep/core/check.h"
#include "lockstep/ops/masked_softmax.h"

#include "attention_bf16_dot.h"
#include "batched_gemm.h"
#include "broadcast_mask.h"
#include "column_softmax.h"
#include "kernel_util.h"
#include "onednn.h"

namespace lockstep::ops {
namespace {

using column_softmax::Lanes;
using column_softmax::load;
using column_softmax::round_lanes_to_bfloat16;
using column_softmax::softmax_columns;
using column_softmax::store;

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
  LOCKSTEP_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), op,
                 ": expected query, key and value of one dtype. Received: query ", q.describe(),
                 ", key ", k.describe(), ", value ", v.describe(), ".");
  LOCKSTEP_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4, op,
                 ": expected query [B, T, H, Dk], key [B, S, H, Dk] and value [B, S, H, Dv] (rank "
                 "4). Received: query ",
                 q.describe(), ", key ", k.describe(), ", value ", v.describe(), ".");
  Dims d{q.dim(0), q.dim(1), k.dim(1), q.dim(2), q.dim(3), v.dim(3)};
  const bool ok = k.dim(0) == d.B && v.dim(0) == d.B && k.dim(2) == d.H && v.dim(2) == d.H &&
                  k.dim(3) == d.Dk && v.dim(1) == d.S;
  LOCKSTEP_CHECK(ok, op,
                 ": expected query [B, T, H, Dk], key [B, S, H, Dk] and value [B, S, H, Dv] with "
                 "equal B, H, Dk and S. Received: query ",
                 q.describe(), ", key ", k.describe(), ", value ", v.describe(), ".");
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
  bool round;                                 // AttentionOptions::bfloat16_values
};

Plan make_plan(const Dims& d, DType dtype, const AttentionOptions& o, const char* op) {
  LOCKSTEP_CHECK(o.scale >= 0 && std::isfinite(o.scale), op,
                 ": expected scale >= 0 (0: 1/sqrt(Dk)). Received: ", o.scale, ".");
  Plan p{d,
         dtype,
         dtype == DType::float64 ? DType::float64 : DType::float32,
         o.scale > 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(1, d.Dk))),
         o.is_causal,
         std::nullopt,
         attention_block_examples(d.H, d.T, d.S),
         o.bfloat16_values};
  LOCKSTEP_CHECK(!o.bfloat16_values || dtype == DType::float32, op,
                 ": bfloat16 values are kept in float32 tensors; expected float32 query, key and "
                 "value. Received: ",
                 dtype_name(dtype), ".");
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

// The block's transposed scores (or probabilities, or their gradients): n × H matrices [S, T],
// each row padded to `ld` >= T elements (padded(): whole vectors of the loops' build) so that the
// softmax over s, a column of these matrices, runs on whole vectors of queries.
StridedBatch scores_t(const Tensor& t, int64_t n, const Dims& d, int64_t ld) {
  return {.data = t.raw_data(),
          .dtype = t.dtype(),
          .b0 = n,
          .b1 = d.H,
          .rows = d.S,
          .cols = d.T,
          .s0 = d.H * d.S * ld,
          .s1 = d.S * ld,
          .rs = ld,
          .cs = 1};
}

// The float32 lanes of one register in the loops' build: 4, 8 or 16.
LOCKSTEP_DISPATCHED_LANES(int64_t, loop_float_lanes, (), ()) {
  return kFloatLanes;
}

// A row of the transposed scores holds T queries and is padded to whole vectors of the loops'
// build: the padding columns are computed and thrown away, so the narrower the vector, the fewer
// (49 queries: 64 columns in the AVX-512 build, 56 in the AVX2 one, 52 in the baseline). Every
// column is computed on its own, so the padding changes no bits.
int64_t padded(int64_t t) {
  const int64_t w = loop_float_lanes();
  return (t + w - 1) / w * w;
}

bool masking(const Plan& p) {
  return p.causal || p.mask.has_value();
}

// Writes `value` at the dropped positions of the block's transposed scores (examples b0...).
template <typename A>
void set_dropped(A* scores, const Plan& p, int64_t b0, int64_t n, int64_t ld, A value) {
  const Dims& d = p.d;
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      for (int64_t s = 0; s < d.S; ++s) {
        A* row = scores + ((b * d.H + h) * d.S + s) * ld;  // scores[., t] for key s
        if (p.causal) {
          for (int64_t t = 0; t < std::min(s, d.T); ++t) row[t] = value;  // s > t
        }
        if (p.mask) {
          const auto& st = p.mask->strides;
          const uint8_t* keep = p.mask->data() + (b0 + b) * st[0] + h * st[1] + s * st[3];
          const int64_t ts = st[2];
          for (int64_t t = 0; t < d.T; ++t) {
            if (!keep[t * ts]) row[t] = value;
          }
        }
      }
    }
  }
}

// Softmax over each column of `count` matrices [rows, ld] (ld whole vectors), in place: the
// max, the exponentials and their sum run down the columns, two vectors at a time, with no
// reduction across lanes. With `rounded`, the probabilities rounded to bfloat16 values also go
// there (same layout), in the same pass.
LOCKSTEP_DISPATCHED_LANES(void, softmax_columns_f32,
                          (float* __restrict x, int64_t count, int64_t rows, int64_t ld,
                           float* __restrict rounded),
                          (x, count, rows, ld, rounded)) {
  constexpr int W = kFloatLanes;
  for (int64_t c = 0; c < count; ++c, x += rows * ld) {
    softmax_columns<W>(x, rows, ld, rounded);
    if (rounded) rounded += rows * ld;
  }
}

// dP <- P ⊙ (dP − Σ_rows P ⊙ dP) down each column, likewise.
LOCKSTEP_DISPATCHED_LANES(void, softmax_grad_columns_f32,
                          (const float* __restrict p, float* __restrict dp, int64_t count,
                           int64_t rows, int64_t ld),
                          (p, dp, count, rows, ld)) {
  constexpr int W = kFloatLanes;
  typename Lanes<W>::F a, g, dot;
  for (int64_t c = 0; c < count; ++c, p += rows * ld, dp += rows * ld) {
    for (int64_t j = 0; j < ld; j += W) {
      dot = typename Lanes<W>::F{};
      for (int64_t r = 0; r < rows; ++r) {
        load(a, p + r * ld + j);
        load(g, dp + r * ld + j);
        dot += a * g;
      }
      for (int64_t r = 0; r < rows; ++r) {
        load(a, p + r * ld + j);
        load(g, dp + r * ld + j);
        store(dp + r * ld + j, a * (g - dot));
      }
    }
  }
}

// The two products of attention for one (example, head), written for these shapes: a head is a
// few dozen rows of a few dozen features (the ViT's are 49 x 16), where a general matmul spends
// most of its time on set-up and packing. Operands are float32 or bfloat16 (read as their float32
// values: the products of two bfloat16 values are exact in float32); both products accumulate in
// float32 as a matmul accumulates: float32 operands in the order of the sum's index, bfloat16 ones
// pair by pair as AVX512_BF16's dot product adds them (in_sum_order), which runs them where the
// CPU has it (attention_bf16_dot.h). A bfloat16 result is the float32 sum rounded once to nearest
// even.

[[gnu::always_inline]] inline float value_of(float v) {
  return v;
}
[[gnu::always_inline]] inline float value_of(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
template <int W>
[[gnu::always_inline]] inline void load(typename Lanes<W>::F& v, const uint16_t* p) {
  typename Lanes<W>::H h;
  std::memcpy(&h, p, sizeof h);
  v = (typename Lanes<W>::F)(__builtin_convertvector(h, typename Lanes<W>::U) << 16);
}
template <int W>
[[gnu::always_inline]] inline void load(typename Lanes<W>::F& v, const float* p) {
  load(v, p);
}
// Rounds to bfloat16, nearest even; NaN stays a quiet NaN (as bfloat16(float)).
template <int W>
[[gnu::always_inline]] inline void store(uint16_t* p, const typename Lanes<W>::F& v) {
  using U = typename Lanes<W>::U;
  const U u = (U)v;
  const U rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const U quiet_nan = (u >> 16) | 0x0040u;
  const auto h = __builtin_convertvector((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded,
                                         typename Lanes<W>::H);
  std::memcpy(p, &h, sizeof h);
}
template <int W>
[[gnu::always_inline]] inline void store(float* p, const typename Lanes<W>::F& v) {
  store(p, v);
}

// acc + x·v, where x and v hold bfloat16 values when kExact. Such a product has at most 16
// significant bits, so it is exact in float32 and a fused multiply-add rounds the same sum as a
// multiply then an add: the AVX2 and AVX-512 builds fuse them (half the instructions of the
// products of attention) and the baseline build, which has no FMA, does not. The builds then still
// agree to the bit, except where a product is below 2^-126 in magnitude (the separate multiply
// flushes it to zero, lockstep/core/denormals.h; the fused one adds it) or beyond float32's range.
// Float32 factors (kExact false) multiply and add apart in every build.
template <int W, bool kExact>
[[gnu::always_inline]] inline void add_product(typename Lanes<W>::F& acc,
                                               const typename Lanes<W>::F& x,
                                               const typename Lanes<W>::F& v) {
#if defined(__x86_64__)
  // As inline assembly: contraction is off for the library, the intrinsics need a target attribute
  // this helper cannot carry, and GCC leaves per-lane fmaf calls partly scalar.
  // Operands go through locals: an asm operand naming an element of an accumulator array would
  // keep the whole array in memory.
  if constexpr (kExact && W == 16) {
    typename Lanes<W>::F a = acc, b = x, c = v;
    asm("vfmadd231ps %2, %1, %0" : "+v"(a) : "v"(b), "v"(c));
    acc = a;
    return;
  } else if constexpr (kExact && W == 8) {
    typename Lanes<W>::F a = acc, b = x, c = v;
    asm("vfmadd231ps %2, %1, %0" : "+x"(a) : "x"(b), "x"(c));
    acc = a;
    return;
  }
#endif
  acc += x * v;
}

// The order of a sum of n terms: with kPairs (products of two bfloat16 values) pairs of terms
// (0, 1), (2, 3), ..., the odd one of each pair first — the order AVX512_BF16's dot product adds a
// pair in (attention_bf16_dot.h), so that every build and that instruction give the same bits —
// else the index order. A lone last term of an odd n is added alone: the instruction adds a zero
// product before it, which changes no sum that starts from +0.
template <bool kPairs, typename Step>
[[gnu::always_inline]] inline void in_sum_order(int64_t n, Step&& step) {
  if constexpr (kPairs) {
    for (int64_t i = 0; i < n; i += 2) {
      if (i + 1 < n) step(i + 1);
      step(i);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) step(i);
  }
}

// NV vectors (W queries each) of rows s and, with TWO, s + 1 of yt; see scores_kernel.
template <int W, int NV, bool TWO, typename T>
[[gnu::always_inline]] inline void scores_rows(const T* __restrict a0, const T* __restrict a1,
                                               const float* __restrict bt, int64_t D, int64_t ld,
                                               float alpha, float* __restrict y0,
                                               float* __restrict y1) {
  using F = typename Lanes<W>::F;
  constexpr bool kBf16 = std::is_same_v<T, uint16_t>;  // both factors bfloat16 values
  F acc0[NV] = {}, acc1[NV] = {};
  in_sum_order<kBf16>(D, [&](int64_t dd) {
    const F x0 = value_of(a0[dd]) - F{};  // a broadcast: a − 0 is a for every float
    const F x1 = TWO ? value_of(a1[dd]) - F{} : F{};
    F v;
    for (int u = 0; u < NV; ++u) {
      load(v, bt + dd * ld + W * u);
      add_product<W, kBf16>(acc0[u], x0, v);
      if (TWO) add_product<W, kBf16>(acc1[u], x1, v);
    }
  });
  for (int u = 0; u < NV; ++u) {
    store(y0 + W * u, F(acc0[u] * alpha));
    if (TWO) store(y1 + W * u, F(acc1[u] * alpha));
  }
}

template <int W, int NV, typename T>
[[gnu::always_inline]] inline void scores_columns(const T* __restrict a, int64_t a_rs, int64_t S,
                                                  const float* __restrict bt, int64_t D, int64_t ld,
                                                  float alpha, float* __restrict yt) {
  int64_t s = 0;
  for (; s + 2 <= S; s += 2) {
    scores_rows<W, NV, true>(a + s * a_rs, a + (s + 1) * a_rs, bt, D, ld, alpha, yt + s * ld,
                             yt + (s + 1) * ld);
  }
  if (s < S) scores_rows<W, NV, false>(a + s * a_rs, a, bt, D, ld, alpha, yt + s * ld, yt);
}

// yt[s, t] = alpha · Σ_d a[s, d] · b[t, d] for s < S and t < ld (ld whole vectors, >= T): the
// transposed scores as scores_t lays them out, float32. b is first transposed into bt [D, ld]
// (float32 values, zero for t >= T, so the padding columns come out 0), W × W blocks at a time in
// registers and the features past the last whole block one at a time; then each row of yt is a
// sum of the D rows of bt scaled by broadcast elements of a: up to four vectors of queries of two
// rows at a time, eight accumulators in registers at any width.
template <int W, typename T>
[[gnu::always_inline]] inline void scores_kernel(const T* __restrict a, int64_t a_rs, int64_t S,
                                                 const T* __restrict b, int64_t b_rs, int64_t T_,
                                                 int64_t D, int64_t ld, float alpha,
                                                 float* __restrict bt, float* __restrict yt) {
  using F = typename Lanes<W>::F;
  int64_t d0 = 0;
  for (; d0 + W <= D; d0 += W) {
    for (int64_t t0 = 0; t0 < ld; t0 += W) {
      F r[W];
      for (int i = 0; i < W; ++i) {
        if (t0 + i < T_) {
          load<W>(r[i], b + (t0 + i) * b_rs + d0);
        } else {
          r[i] = F{};
        }
      }
      ::lockstep::detail::lane_transpose::transpose<W>(r);
      for (int i = 0; i < W; ++i) store(bt + (d0 + i) * ld + t0, r[i]);
    }
  }
  for (int64_t dd = d0; dd < D; ++dd) {
    for (int64_t t = 0; t < T_; ++t) bt[dd * ld + t] = value_of(b[t * b_rs + dd]);
    for (int64_t t = T_; t < ld; ++t) bt[dd * ld + t] = 0.0f;
  }
  for (int64_t j = 0; j < ld; j += 4 * W) {
    switch (std::min<int64_t>(4, (ld - j) / W)) {
      case 4:
        scores_columns<W, 4>(a, a_rs, S, bt + j, D, ld, alpha, yt + j);
        break;
      case 3:
        scores_columns<W, 3>(a, a_rs, S, bt + j, D, ld, alpha, yt + j);
        break;
      case 2:
        scores_columns<W, 2>(a, a_rs, S, bt + j, D, ld, alpha, yt + j);
        break;
      default:
        scores_columns<W, 1>(a, a_rs, S, bt + j, D, ld, alpha, yt + j);
        break;
    }
  }
}
LOCKSTEP_DISPATCHED_LANES(void, scores_f32,
                          (const float* a, int64_t a_rs, int64_t S, const float* b, int64_t b_rs,
                           int64_t T, int64_t D, int64_t ld, float alpha, float* bt, float* yt),
                          (a, a_rs, S, b, b_rs, T, D, ld, alpha, bt, yt)) {
  scores_kernel<kFloatLanes>(a, a_rs, S, b, b_rs, T, D, ld, alpha, bt, yt);
}
LOCKSTEP_DISPATCHED_LANES(void, scores_bf16,
                          (const uint16_t* a, int64_t a_rs, int64_t S, const uint16_t* b,
                           int64_t b_rs, int64_t T, int64_t D, int64_t ld, float alpha, float* bt,
                           float* yt),
                          (a, a_rs, S, b, b_rs, T, D, ld, alpha, bt, yt)) {
  scores_kernel<kFloatLanes>(a, a_rs, S, b, b_rs, T, D, ld, alpha, bt, yt);
}

// R output rows [i, i + R) of weighted_rows, features [c, c + W), in R registers.
// kRound (float32 y only): y is stored rounded to bfloat16 values (round_lanes_to_bfloat16).
template <int W, int R, bool kRound, typename T>
[[gnu::always_inline]] inline void weighted_block(const float* __restrict w, int64_t wi, int64_t wj,
                                                  int64_t J, const T* __restrict x, int64_t x_rs,
                                                  float alpha, T* __restrict y, int64_t y_rs) {
  using F = typename Lanes<W>::F;
  // bfloat16 x: w holds bfloat16 values too (weighted_rows_bf16).
  constexpr bool kBf16 = std::is_same_v<T, uint16_t>;
  F acc[R] = {};
  in_sum_order<kBf16>(J, [&](int64_t j) {
    F v;
    load<W>(v, x + j * x_rs);
    const float* wj0 = w + j * wj;
    for (int u = 0; u < R; ++u) add_product<W, kBf16>(acc[u], wj0[u * wi] - F{}, v);  // a broadcast
  });
  for (int u = 0; u < R; ++u) {
    F out = acc[u] * alpha;
    if constexpr (kRound) round_lanes_to_bfloat16<W>(out);
    store<W>(y + u * y_rs, out);
  }
}

// y[i, c] = alpha · Σ_{j < J} w[i·wi + j·wj] · x[j, c] for i < I and c < D (w float32, x and y
// float32 or bfloat16; with bfloat16 x, w must hold bfloat16 values, as the callers' rounded
// probabilities and score gradients do): a weighted sum of rows of x per output row (the weighted
// values P·V, and the gradients dV, dQ, dK), W features per vector, eight output rows at a time
// (eight independent sums keep the multiply and add units busy); features past the last multiple of
// W run as scalars, in the same order.
template <int W, bool kRound = false, typename T>
[[gnu::always_inline]] inline void weighted_rows(const float* __restrict w, int64_t wi, int64_t wj,
                                                 int64_t I, int64_t J, const T* __restrict x,
                                                 int64_t x_rs, int64_t D, float alpha,
                                                 T* __restrict y, int64_t y_rs) {
  const int64_t dv = D / W * W;
  for (int64_t c = 0; c < dv; c += W) {
    int64_t i = 0;
    for (; i + 8 <= I; i += 8) {
      weighted_block<W, 8, kRound>(w + i * wi, wi, wj, J, x + c, x_rs, alpha, y + i * y_rs + c,
                                   y_rs);
    }
    if (i + 4 <= I) {
      weighted_block<W, 4, kRound>(w + i * wi, wi, wj, J, x + c, x_rs, alpha, y + i * y_rs + c,
                                   y_rs);
      i += 4;
    }
    for (; i < I; ++i) {
      weighted_block<W, 1, kRound>(w + i * wi, wi, wj, J, x + c, x_rs, alpha, y + i * y_rs + c,
                                   y_rs);
    }
  }
  for (int64_t c = dv; c < D; ++c) {
    for (int64_t i = 0; i < I; ++i) {
      float acc = 0;
      in_sum_order<std::is_same_v<T, uint16_t>>(
          J, [&](int64_t j) { acc += w[i * wi + j * wj] * value_of(x[j * x_rs + c]); });
      acc *= alpha;
      if constexpr (std::is_same_v<T, float>) {
        y[i * y_rs + c] = kRound ? round_to_bfloat16_value(acc) : acc;
      } else {
        y[i * y_rs + c] = bfloat16(acc).bits;
      }
    }
  }
}
LOCKSTEP_DISPATCHED_LANES(void, weighted_rows_f32,
                          (const float* w, int64_t wi, int64_t wj, int64_t I, int64_t J,
                           const float* x, int64_t x_rs, int64_t D, float alpha, float* y,
                           int64_t y_rs),
                          (w, wi, wj, I, J, x, x_rs, D, alpha, y, y_rs)) {
  weighted_rows<kFloatLanes>(w, wi, wj, I, J, x, x_rs, D, alpha, y, y_rs);
}
LOCKSTEP_DISPATCHED_LANES(void, weighted_rows_f32_rounded,
                          (const float* w, int64_t wi, int64_t wj, int64_t I, int64_t J,
                           const float* x, int64_t x_rs, int64_t D, float alpha, float* y,
                           int64_t y_rs),
                          (w, wi, wj, I, J, x, x_rs, D, alpha, y, y_rs)) {
  weighted_rows<kFloatLanes, true>(w, wi, wj, I, J, x, x_rs, D, alpha, y, y_rs);
}
LOCKSTEP_DISPATCHED_LANES(void, weighted_rows_bf16,
                          (const float* w, int64_t wi, int64_t wj, int64_t I, int64_t J,
                           const uint16_t* x, int64_t x_rs, int64_t D, float alpha, uint16_t* y,
                           int64_t y_rs),
                          (w, wi, wj, I, J, x, x_rs, D, alpha, y, y_rs)) {
  weighted_rows<kFloatLanes>(w, wi, wj, I, J, x, x_rs, D, alpha, y, y_rs);
}

template <bool GRAD>
void columns_f64(const double* p, double* x, int64_t count, int64_t rows, int64_t ld) {
  std::vector<double> acc(static_cast<size_t>(ld)), m(static_cast<size_t>(ld));
  for (int64_t c = 0; c < count; ++c, p += rows * ld, x += rows * ld) {
    if (GRAD) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < ld; ++j)
          acc[static_cast<size_t>(j)] += p[r * ld + j] * x[r * ld + j];
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < ld; ++j)
          x[r * ld + j] = p[r * ld + j] * (x[r * ld + j] - acc[static_cast<size_t>(j)]);
    } else {
      std::copy(x, x + ld, m.begin());
      for (int64_t r = 1; r < rows; ++r)
        for (int64_t j = 0; j < ld; ++j)
          m[static_cast<size_t>(j)] = std::max(m[static_cast<size_t>(j)], x[r * ld + j]);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < ld; ++j)
          acc[static_cast<size_t>(j)] +=
              (x[r * ld + j] = std::exp(x[r * ld + j] - m[static_cast<size_t>(j)]));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < ld; ++j) x[r * ld + j] /= acc[static_cast<size_t>(j)];
    }
  }
}

// `rounded`: undefined, or float32 for the probabilities rounded to bfloat16 values.
void softmax_columns(const Tensor& scores, int64_t count, int64_t rows, int64_t ld,
                     const Tensor& rounded) {
  if (scores.dtype() == DType::float64) {
    columns_f64<false>(nullptr, scores.data<double>(), count, rows, ld);
  } else {
    softmax_columns_f32(scores.data<float>(), count, rows, ld,
                        rounded.defined() ? rounded.data<float>() : nullptr);
  }
}

void softmax_grad_columns(const Tensor& probs, const Tensor& dprobs, int64_t count, int64_t rows,
                          int64_t ld) {
  if (probs.dtype() == DType::float64) {
    columns_f64<true>(probs.data<double>(), dprobs.data<double>(), count, rows, ld);
  } else {
    softmax_grad_columns_f32(probs.data<float>(), dprobs.data<float>(), count, rows, ld);
  }
}

// The block's float32 (or float64) buffer as the matmuls with bfloat16 operands take it: itself,
// or rounded to bfloat16 values (kept in float32) into `low`.
const Tensor& in_operand_dtype(const Tensor& acc, const Tensor& low, int64_t count) {
  if (!low.defined()) return acc;
  round_to_bfloat16_values(acc.data<float>(), low.data<float>(), static_cast<size_t>(count));
  return low;
}

// Element (b, 0, h, 0) of a [B, rows, H, D] tensor, as float or bfloat16 bits; its rows are H·D
// apart.
template <typename E>
E* head_data(const Tensor& t, int64_t b, int64_t h) {
  auto* base = static_cast<E*>(const_cast<void*>(t.raw_data()));
  return base + (b * t.dim(1) * t.dim(2) + h) * t.dim(3);
}
int64_t row_stride(const Tensor& t) {
  return t.dim(2) * t.dim(3);
}

// This thread's scratch for the packed pairs of the AVX512_BF16 products (attention_bf16_dot.h):
// grown, never shrunk, so that the training step's calls allocate nothing after the first.
enum class PairScratch { scores, weights, rows };
uint32_t* pair_scratch(PairScratch which, size_t words) {
  thread_local std::vector<uint32_t> buffers[3];
  std::vector<uint32_t>& b = buffers[static_cast<int>(which)];
  if (b.size() < words) b.resize(words);
  return b.data();
}

// For n examples and every head: yt = alpha · a · bᵀ into the block's transposed scores ([S, ld]
// per head), with a [., S, H, D] from example a0 and b [., T, H, D] from example b0.
void scores_product(const Tensor& a, int64_t a0, const Tensor& b, int64_t b0, int64_t n,
                    const Dims& d, int64_t ld, double alpha, const Tensor& yt) {
  if (yt.dtype() == DType::float64) {
    detail::batched_gemm(heads(a, a0, n, d.H), heads(b, b0, n, d.H).t(), scores_t(yt, n, d, ld),
                         alpha);
    return;
  }
  const int64_t D = a.dim(3);
  const bool bf16 = a.dtype() == DType::bfloat16;
  const bool dot = bf16 && ld % 16 == 0 && detail::attention_bf16_dot_available();
  // The operand b as the kernel reads it: pairs of bfloat16 values, or transposed to float32.
  uint32_t* pairs =
      dot ? pair_scratch(PairScratch::scores, static_cast<size_t>((D + 1) / 2 * ld)) : nullptr;
  Tensor bt;
  if (!dot) bt = Tensor({std::max<int64_t>(1, D * ld)}, DType::float32);
  for (int64_t e = 0; e < n; ++e) {
    for (int64_t h = 0; h < d.H; ++h) {
      float* y = yt.data<float>() + (e * d.H + h) * d.S * ld;
      if (dot) {
        detail::scores_bf16_dot(head_data<uint16_t>(a, a0 + e, h), row_stride(a), d.S,
                                head_data<uint16_t>(b, b0 + e, h), row_stride(b), d.T, D, ld,
                                static_cast<float>(alpha), pairs, y);
      } else if (bf16) {
        scores_bf16(head_data<uint16_t>(a, a0 + e, h), row_stride(a), d.S,
                    head_data<uint16_t>(b, b0 + e, h), row_stride(b), d.T, D, ld,
                    static_cast<float>(alpha), bt.data<float>(), y);
      } else {
        scores_f32(head_data<float>(a, a0 + e, h), row_stride(a), d.S,
                   head_data<float>(b, b0 + e, h), row_stride(b), d.T, D, ld,
                   static_cast<float>(alpha), bt.data<float>(), y);
      }
    }
  }
}

// For n examples and every head: y = alpha · W · x, W the head's [S, ld] block of `wt` (the
// transposed probabilities or score gradients) as it is (W [S, T]: y [., S, H, D] from
// x [., T, H, D]) or transposed (W [T, S]: y [., T, H, D] from x [., S, H, D]); x from example x0,
// y from example y0. round: a float32 y is stored rounded to bfloat16 values.
void weighted_product(const Tensor& wt, bool transpose, const Tensor& x, int64_t x0, int64_t n,
                      const Dims& d, int64_t ld, double alpha, const Tensor& y, int64_t y0,
                      bool round) {
  if (wt.dtype() == DType::float64) {
    const StridedBatch w = transpose ? scores_t(wt, n, d, ld).t() : scores_t(wt, n, d, ld);
    detail::batched_gemm(w, heads(x, x0, n, d.H), heads(y, y0, n, d.H), alpha);
    return;
  }
  const int64_t I = transpose ? d.T : d.S, J = transpose ? d.S : d.T;
  const int64_t wi = transpose ? 1 : ld, wj = transpose ? ld : 1;
  const bool dot = x.dtype() == DType::bfloat16 && detail::attention_bf16_dot_available();
  const int64_t J2 = (J + 1) / 2;
  uint32_t* w_pairs =
      dot ? pair_scratch(PairScratch::weights, static_cast<size_t>((I + 15) / 16 * 16 * J2))
          : nullptr;
  uint32_t* x_pairs =
      dot ? pair_scratch(PairScratch::rows, static_cast<size_t>(J2 * x.dim(3))) : nullptr;
  for (int64_t e = 0; e < n; ++e) {
    for (int64_t h = 0; h < d.H; ++h) {
      const float* w = wt.data<float>() + (e * d.H + h) * d.S * ld;
      if (dot) {
        detail::weighted_rows_bf16_dot(w, wi, wj, I, J, head_data<uint16_t>(x, x0 + e, h),
                                       row_stride(x), x.dim(3), static_cast<float>(alpha),
                                       head_data<uint16_t>(y, y0 + e, h), row_stride(y), w_pairs,
                                       x_pairs);
      } else if (x.dtype() == DType::bfloat16) {
        weighted_rows_bf16(w, wi, wj, I, J, head_data<uint16_t>(x, x0 + e, h), row_stride(x),
                           x.dim(3), static_cast<float>(alpha), head_data<uint16_t>(y, y0 + e, h),
                           row_stride(y));
      } else {
        auto rows = round ? weighted_rows_f32_rounded : weighted_rows_f32;
        rows(w, wi, wj, I, J, head_data<float>(x, x0 + e, h), row_stride(x), x.dim(3),
             static_cast<float>(alpha), head_data<float>(y, y0 + e, h), row_stride(y));
      }
    }
  }
}

// A block's examples of q, k or v as the kernels read them: the tensor itself from example b0, or
// (bfloat16_values, for a tensor not already holding them) those examples rounded to bfloat16
// values into `scratch` ([block, rows, H, D], from example 0; a copy the block's products then
// find in the core's cache).
struct BlockOperand {
  const Tensor& t;
  int64_t first;
};
BlockOperand block_operand(const Tensor& t, const Tensor& scratch, int64_t b0, int64_t n) {
  if (!scratch.defined()) return {t, b0};
  const int64_t per_example = t.dim(1) * t.dim(2) * t.dim(3);
  round_to_bfloat16_values(t.data<float>() + b0 * per_example, scratch.data<float>(),
                           static_cast<size_t>(n * per_example));
  return {scratch, 0};
}
// Where block_operand rounds `t`: nowhere (no rounding, or t holds bfloat16 values already) or a
// scratch tensor of one block.
Tensor rounding_scratch(const Plan& p, const Tensor& t, int64_t block) {
  if (!p.round || t.holds_bfloat16_values()) return Tensor();
  return Tensor({block, t.dim(1), t.dim(2), t.dim(3)}, DType::float32);
}

// Probabilities of examples [b0, b0 + n), transposed, into `probs` ([n, H, S, ld], acc dtype) and,
// when defined, rounded to bfloat16 values into `rounded` (the operand of the products with
// bfloat16 values). Returns what those products take: `rounded` if defined, else `probs` (a
// handle: the same storage).
Tensor block_probabilities(const Plan& p, const BlockOperand& q, const BlockOperand& k, int64_t b0,
                           int64_t n, int64_t ld, const Tensor& probs, const Tensor& rounded) {
  const Dims& d = p.d;
  scores_product(k.t, k.first, q.t, q.first, n, d, ld, p.scale, probs);
  if (masking(p)) {
    if (p.acc == DType::float64) {
      set_dropped(probs.data<double>(), p, b0, n, ld, kMaskedScore);
    } else {
      set_dropped(probs.data<float>(), p, b0, n, ld, static_cast<float>(kMaskedScore));
    }
  }
  softmax_columns(probs, n * d.H, d.S, ld, rounded);
  return rounded.defined() ? rounded : probs;
}

}  // namespace

int64_t attention_block_examples(int64_t heads, int64_t t, int64_t s) {
  if (int64_t forced = block_override().load(); forced > 0) return forced;
  // About 192 KiB of float32 scores per block: the scores, their gradient and the bfloat16 copies
  // stay in the core's L2 between the matmul that writes them and the ones that read them.
  const int64_t per_example = std::max<int64_t>(1, heads * s * padded(t) * 4);
  return std::max<int64_t>(1, (192 * 1024) / per_example);
}

void set_attention_block_examples(int64_t examples) {
  block_override().store(std::max<int64_t>(0, examples));
}

Tensor dot_product_attention_forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const AttentionOptions& options) {
  const char* op = "dot_product_attention";
  const Dims d = check(query, key, value, op);
  const Plan p = make_plan(d, query.dtype(), options, op);
  Tensor out({d.B, d.T, d.H, d.Dv}, query.dtype());
  if (out.num_elements() == 0) return out;
  if (d.S == 0) return Tensor::zeros(out.shape(), out.dtype());  // no keys: empty sums
  const int64_t block = std::min(p.block, d.B), ld = padded(d.T);
  const bool bf16 = p.dtype == DType::bfloat16;
  const Tensor &q = query, &k = key, &v = value;
  // Zeros: the padding columns then hold finite values through the softmax.
  Tensor probs = Tensor::zeros({block * d.H * d.S * ld}, p.acc);
  Tensor low = bf16 ? Tensor(probs.shape(), DType::float32) : Tensor();
  const Tensor sq = rounding_scratch(p, q, block), sk = rounding_scratch(p, k, block),
               sv = rounding_scratch(p, v, block);
  for (int64_t b0 = 0; b0 < d.B; b0 += block) {
    const int64_t n = std::min(block, d.B - b0);
    const BlockOperand bq = block_operand(q, sq, b0, n), bk = block_operand(k, sk, b0, n),
                       bv = block_operand(v, sv, b0, n);
    const Tensor pv = block_probabilities(p, bq, bk, b0, n, ld, probs, low);
    weighted_product(pv, true, bv.t, bv.first, n, d, ld, 1.0, out, b0, p.round);
  }
  if (p.round) out.mark_bfloat16_values();
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
  LOCKSTEP_CHECK(doutput.shape() == expected && doutput.dtype() == query.dtype(), op,
                 ": expected doutput of shape ", expected.to_string(), " and dtype ",
                 dtype_name(query.dtype()), ". Received: ", doutput.describe(), ".");
  const Plan p = make_plan(d, query.dtype(), options, op);
  AttentionGrads g;
  if (d.B * d.H * d.T * d.S == 0) {  // no scores: nothing depends on the inputs
    if (need_dquery) g.dquery = Tensor::zeros(query.shape(), query.dtype());
    if (need_dkey) g.dkey = Tensor::zeros(key.shape(), key.dtype());
    if (need_dvalue) g.dvalue = Tensor::zeros(value.shape(), value.dtype());
    return g;
  }
  // Every block writes its examples' rows of each gradient in full.
  const bool bf16 = p.dtype == DType::bfloat16;
  if (need_dquery) g.dquery = Tensor(query.shape(), query.dtype());
  if (need_dkey) g.dkey = Tensor(key.shape(), key.dtype());
  if (need_dvalue) g.dvalue = Tensor(value.shape(), value.dtype());
  const Tensor &q = query, &k = key, &v = value;
  // The gradient of an output of bfloat16 values is read rounded as a bfloat16 tensor's would be
  // (block by block, as q, k and v are).
  const Tensor& dout = doutput;
  const int64_t block = std::min(p.block, d.B), ld = padded(d.T);
  const int64_t block_elems = block * d.H * d.S * ld;
  Tensor probs = Tensor::zeros({block_elems}, p.acc), dprobs = Tensor::zeros({block_elems}, p.acc);
  Tensor low_p = bf16 ? Tensor({block_elems}, DType::float32) : Tensor();
  Tensor low_ds = bf16 ? Tensor({block_elems}, DType::float32) : Tensor();
  const Tensor sq = rounding_scratch(p, q, block), sk = rounding_scratch(p, k, block),
               sv = rounding_scratch(p, v, block), sdout = rounding_scratch(p, dout, block);
  for (int64_t b0 = 0; b0 < d.B; b0 += block) {
    const int64_t n = std::min(block, d.B - b0);
    const int64_t count = n * d.H * d.S * ld;
    const BlockOperand bq = block_operand(q, sq, b0, n), bk = block_operand(k, sk, b0, n),
                       bdout = block_operand(dout, sdout, b0, n);
    const Tensor pv =
        block_probabilities(p, bq, bk, b0, n, ld, probs, need_dvalue ? low_p : Tensor());
    if (need_dvalue) {  // dV = Pᵀ · dO
      weighted_product(pv, false, bdout.t, bdout.first, n, d, ld, 1.0, g.dvalue, b0, p.round);
    }
    if (!need_dquery && !need_dkey) continue;
    // dPᵀ = V · dOᵀ
    const BlockOperand bv = block_operand(v, sv, b0, n);
    scores_product(bv.t, bv.first, bdout.t, bdout.first, n, d, ld, 1.0, dprobs);
    softmax_grad_columns(probs, dprobs, n * d.H, d.S, ld);
    if (masking(p)) {
      if (p.acc == DType::float64) {
        set_dropped(dprobs.data<double>(), p, b0, n, ld, 0.0);
      } else {
        set_dropped(dprobs.data<float>(), p, b0, n, ld, 0.0f);
      }
    }
    const Tensor& ds = in_operand_dtype(dprobs, low_ds, count);
    if (need_dquery) {  // dQ = scale · dScores · K
      weighted_product(ds, true, bk.t, bk.first, n, d, ld, p.scale, g.dquery, b0, p.round);
    }
    if (need_dkey) {  // dK = scale · dScoresᵀ · Q
      weighted_product(ds, false, bq.t, bq.first, n, d, ld, p.scale, g.dkey, b0, p.round);
    }
  }
  if (p.round) {
    for (const Tensor* t : {&g.dquery, &g.dkey, &g.dvalue}) {
      if (t->defined()) t->mark_bfloat16_values();
    }
  }
  return g;
}

}  // namespace lockstep::ops
