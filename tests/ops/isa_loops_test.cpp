// Lockstep's own ops loops are built for x86-64, x86-64-v3 and x86-64-v4 (core/cpu_dispatch.h) and
// chosen under the ISA cap; each must give the bits of its scalar definition, written here (this
// file compiles without FMA contraction). The isa label runs this file under every cap, so every
// build meets the same scalar bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/bfloat16.h"
#include "lockstep/ops/activations.h"
#include "lockstep/ops/attention.h"
#include "lockstep/ops/bfloat16_values.h"
#include "lockstep/ops/elementwise.h"
#include "lockstep/ops/nn_norm.h"
#include "lockstep/ops/softmax.h"

namespace lockstep {
namespace {

std::vector<float> values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  if (n > 4) {
    v[0] = -0.0f;
    v[1] = std::numeric_limits<float>::quiet_NaN();
    v[2] = -std::numeric_limits<float>::infinity();
    v[3] = std::numeric_limits<float>::denorm_min();
  }
  return v;
}

// values() with the non-finite ones replaced (a NaN or infinity would make a whole attention head
// or layer-normalization row NaN).
std::vector<float> finite_values(size_t n, uint32_t seed) {
  std::vector<float> v = values(n, seed);
  for (float& e : v) e = std::isfinite(e) ? e : 0.5f;
  return v;
}

bool same_bits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

TEST(IsaLoops, ReluAndItsGradientGiveTheScalarBits) {
  for (size_t n : {size_t{7}, size_t{333}, size_t{4101}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const std::vector<float> x = values(n, 1), dy = values(n, 2);
    const int64_t len = static_cast<int64_t>(n);
    Tensor y = ops::relu_forward(Tensor::from_vector(x, {len}));
    Tensor dx = ops::relu_backward(Tensor::from_vector(dy, {len}), y);
    std::vector<float> want_y(n), want_dx(n);
    for (size_t i = 0; i < n; ++i) {
      want_y[i] = x[i] < 0.0f ? 0.0f : x[i];  // keeps NaN
      want_dx[i] = dy[i] * (want_y[i] > 0.0f ? 1.0f : 0.0f);
    }
    EXPECT_TRUE(same_bits(y.data<float>(), want_y.data(), n));
    EXPECT_TRUE(same_bits(dx.data<float>(), want_dx.data(), n));
  }
}

TEST(IsaLoops, AddGivesTheScalarBitsInFloat32AndBfloat16) {
  for (size_t n : {size_t{7}, size_t{333}, size_t{4101}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const std::vector<float> a = values(n, 3), b = values(n, 4);
    const int64_t len = static_cast<int64_t>(n);
    Tensor sum = ops::add_forward(Tensor::from_vector(a, {len}), Tensor::from_vector(b, {len}));
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
    EXPECT_TRUE(same_bits(sum.data<float>(), want.data(), n));

    std::vector<bfloat16> a16(n), b16(n);
    for (size_t i = 0; i < n; ++i) {
      a16[i] = bfloat16(a[i]);
      b16[i] = bfloat16(b[i]);
    }
    Tensor sum16 =
        ops::add_forward(Tensor::from_vector(a16, {len}), Tensor::from_vector(b16, {len}));
    for (size_t i = 0; i < n; ++i) {
      // bfloat16 operands widened exactly, added in float32, rounded once.
      const uint16_t want16 =
          bfloat16::round_from_float(static_cast<float>(a16[i]) + static_cast<float>(b16[i]));
      uint16_t got;
      std::memcpy(&got, sum16.data<bfloat16>() + i, sizeof got);
      ASSERT_EQ(got, want16) << "element " << i;
    }
  }
}

// Attention's own loops, by their scalar definition: every sum in the order of its index from 0,
// e^x by the kernel's polynomial (Cephes' expf for x <= 0, 0 below -87), probabilities as e times
// the reciprocal of the column's sum. T = S = 37 pads the scores to 48 columns and D = 19 leaves a
// scalar tail, so each build's vector blocks and remainders are all used.
float exp_nonpositive_scalar(float x) {
  const bool under = x < -87.0f;
  if (under) x = -87.0f;
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = x - n * 0.693359375f - n * -2.12194440e-4f;
  float p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return under ? 0.0f : p * scale;
}

// Per head D features: 19 (a tail past the builds' vectors), 16 (whole vectors of every build), 8
// (fewer than the widest build's lanes).
void expect_attention_gives_the_scalar_bits(const int64_t D) {
  SCOPED_TRACE("D=" + std::to_string(D));
  constexpr int64_t B = 2, T = 37, H = 2;
  const std::vector<float> q = finite_values(B * T * H * D, 5), k = finite_values(B * T * H * D, 6),
                           v = finite_values(B * T * H * D, 7),
                           dout = finite_values(B * T * H * D, 8);
  auto at = [D](int64_t b, int64_t t, int64_t h, int64_t d) {
    return ((b * T + t) * H + h) * D + d;
  };
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  struct Sums {
    std::vector<float> out, dq, dk, dv;
  };
  // The scalar definition, for an output gradient `dout`. round_weights: the probabilities and
  // the score gradients are rounded to bfloat16 values before the sums they weight (as bfloat16
  // tensors' attention does; the softmax gradient still reads the float probabilities).
  // bfloat16 tensors (round_weights) add the terms of the four sums and the scores pair by pair,
  // the odd term of each pair first (ops/attention.cpp, in_sum_order); float32 ones in order.
  auto reference = [&](const std::vector<float>& q, const std::vector<float>& k,
                       const std::vector<float>& v, const std::vector<float>& dout,
                       bool round_weights = false) {
    auto sum = [round_weights](int64_t n, auto term) {
      float acc = 0.0f;
      if (round_weights) {
        for (int64_t i = 0; i < n; i += 2) {
          if (i + 1 < n) acc += term(i + 1);
          acc += term(i);
        }
      } else {
        for (int64_t i = 0; i < n; ++i) acc += term(i);
      }
      return acc;
    };
    std::vector<float> out(q.size()), dq(q.size()), dk(q.size()), dv(q.size());
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        // s: key, t: query. Scores, probabilities and their gradients, [s][t].
        std::vector<float> p(T * T), dp(T * T);
        for (int64_t s = 0; s < T; ++s) {
          for (int64_t t = 0; t < T; ++t) {
            const float acc =
                sum(D, [&](int64_t d) { return k[at(b, s, h, d)] * q[at(b, t, h, d)]; });
            const float dacc =
                sum(D, [&](int64_t d) { return v[at(b, s, h, d)] * dout[at(b, t, h, d)]; });
            p[s * T + t] = acc * scale;
            dp[s * T + t] = dacc;
          }
        }
        for (int64_t t = 0; t < T; ++t) {
          float m = p[t];
          for (int64_t s = 1; s < T; ++s) m = p[s * T + t] > m ? p[s * T + t] : m;
          float sum = 0.0f;
          for (int64_t s = 0; s < T; ++s)
            sum += (p[s * T + t] = exp_nonpositive_scalar(p[s * T + t] - m));
          const float inv = 1.0f / sum;
          float dot = 0.0f;
          for (int64_t s = 0; s < T; ++s) dot += (p[s * T + t] *= inv) * dp[s * T + t];
          for (int64_t s = 0; s < T; ++s) dp[s * T + t] = p[s * T + t] * (dp[s * T + t] - dot);
        }
        if (round_weights) {
          for (float& e : p) e = round_to_bfloat16_value(e);
          for (float& e : dp) e = round_to_bfloat16_value(e);
        }
        for (int64_t d = 0; d < D; ++d) {
          for (int64_t t = 0; t < T; ++t) {  // out and dQ: sums over keys
            const float o = sum(T, [&](int64_t s) { return p[s * T + t] * v[at(b, s, h, d)]; });
            const float g = sum(T, [&](int64_t s) { return dp[s * T + t] * k[at(b, s, h, d)]; });
            out[at(b, t, h, d)] = o * 1.0f;
            dq[at(b, t, h, d)] = g * scale;
          }
          for (int64_t s = 0; s < T; ++s) {  // dV and dK: sums over queries
            const float gv = sum(T, [&](int64_t t) { return p[s * T + t] * dout[at(b, t, h, d)]; });
            const float gk = sum(T, [&](int64_t t) { return dp[s * T + t] * q[at(b, t, h, d)]; });
            dv[at(b, s, h, d)] = gv * 1.0f;
            dk[at(b, s, h, d)] = gk * scale;
          }
        }
      }
    }
    return Sums{out, dq, dk, dv};
  };
  const auto [out, dq, dk, dv] = reference(q, k, v, dout);
  const Shape shape{B, T, H, D};
  const Tensor tq = Tensor::from_vector(q, shape), tk = Tensor::from_vector(k, shape),
               tv = Tensor::from_vector(v, shape), tdout = Tensor::from_vector(dout, shape);
  const Tensor y = ops::dot_product_attention_forward(tq, tk, tv);
  const ops::AttentionGrads g = ops::dot_product_attention_backward(tdout, tq, tk, tv);
  EXPECT_TRUE(same_bits(y.data<float>(), out.data(), out.size()));
  EXPECT_TRUE(same_bits(g.dquery.data<float>(), dq.data(), dq.size()));
  EXPECT_TRUE(same_bits(g.dkey.data<float>(), dk.data(), dk.size()));
  EXPECT_TRUE(same_bits(g.dvalue.data<float>(), dv.data(), dv.size()));
  EXPECT_FALSE(y.holds_bfloat16_values());

  // bfloat16_values: the sums of q, k, v and the output gradient rounded to bfloat16 values, each
  // stored rounded to a bfloat16 value, and marked; inputs already marked are read as they are.
  auto rounded = [](std::vector<float> x) {
    for (float& e : x) e = round_to_bfloat16_value(e);
    return x;
  };
  const Sums r = reference(rounded(q), rounded(k), rounded(v), rounded(dout));
  const ops::AttentionOptions bf16_values{.bfloat16_values = true};
  const Tensor marked_q = Tensor::from_vector(rounded(q), shape);
  marked_q.mark_bfloat16_values();
  for (const Tensor* query : {&tq, &marked_q}) {
    SCOPED_TRACE(query == &tq ? "query rounded as read" : "query marked");
    const Tensor ry = ops::dot_product_attention_forward(*query, tk, tv, bf16_values);
    const ops::AttentionGrads rg =
        ops::dot_product_attention_backward(tdout.clone(), *query, tk, tv, bf16_values);
    EXPECT_TRUE(same_bits(ry.data<float>(), rounded(r.out).data(), out.size()));
    EXPECT_TRUE(same_bits(rg.dquery.data<float>(), rounded(r.dq).data(), dq.size()));
    EXPECT_TRUE(same_bits(rg.dkey.data<float>(), rounded(r.dk).data(), dk.size()));
    EXPECT_TRUE(same_bits(rg.dvalue.data<float>(), rounded(r.dv).data(), dv.size()));
    for (const Tensor* t : {&ry, &rg.dquery, &rg.dkey, &rg.dvalue}) {
      EXPECT_TRUE(t->holds_bfloat16_values());
    }
  }
  EXPECT_TRUE(same_bits(tq.data<float>(), q.data(), q.size()));  // the caller's tensors as given
  EXPECT_TRUE(same_bits(tdout.data<float>(), dout.data(), dout.size()));

  // bfloat16 tensors: every product of the four sums is of two bfloat16 values, exact in float32,
  // so the v3 and v4 builds' fused multiply-adds, and AVX512_BF16's dot products where the CPU has
  // them, give the scalar multiply-then-add bits (in pairs, as above).
  const Sums w = reference(rounded(q), rounded(k), rounded(v), rounded(dout), true);
  const Tensor bq = tq.to(DType::bfloat16), bk = tk.to(DType::bfloat16),
               bv = tv.to(DType::bfloat16), bdout = tdout.to(DType::bfloat16);
  const Tensor by = ops::dot_product_attention_forward(bq, bk, bv);
  const ops::AttentionGrads bg = ops::dot_product_attention_backward(bdout, bq, bk, bv);
  auto as_float = [](const Tensor& t) { return t.to(DType::float32); };
  EXPECT_TRUE(same_bits(as_float(by).data<float>(), rounded(w.out).data(), out.size()));
  EXPECT_TRUE(same_bits(as_float(bg.dquery).data<float>(), rounded(w.dq).data(), dq.size()));
  EXPECT_TRUE(same_bits(as_float(bg.dkey).data<float>(), rounded(w.dk).data(), dk.size()));
  EXPECT_TRUE(same_bits(as_float(bg.dvalue).data<float>(), rounded(w.dv).data(), dv.size()));
}

TEST(IsaLoops, AttentionForwardAndBackwardGiveTheScalarBits) {
  expect_attention_gives_the_scalar_bits(19);
  expect_attention_gives_the_scalar_bits(16);
  expect_attention_gives_the_scalar_bits(8);
}

// A softmax over a short last axis (a classifier's ten classes), by its scalar definition: per
// row the largest logit, the exponentials of the differences summed in class order, then each
// times the reciprocal of the sum. 37 rows: whole vectors of every build and a tail.
TEST(IsaLoops, ShortAxisSoftmaxGivesTheScalarBits) {
  constexpr int64_t rows = 37, n = 10;
  const std::vector<float> x = finite_values(rows * n, 9);
  std::vector<float> want(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * n;
    float* wr = want.data() + r * n;
    float m = xr[0];
    for (int64_t k = 1; k < n; ++k) m = xr[k] > m ? xr[k] : m;
    float sum = 0.0f;
    for (int64_t k = 0; k < n; ++k) sum += (wr[k] = exp_nonpositive_scalar(xr[k] - m));
    const float inv = 1.0f / sum;
    for (int64_t k = 0; k < n; ++k) wr[k] *= inv;
  }
  const Tensor p = ops::softmax_forward(Tensor::from_vector(x, {rows, n}), -1);
  EXPECT_TRUE(same_bits(p.data<float>(), want.data(), want.size()));
}

// Layer normalization's row sums, by their scalar definition: sums in eight lanes (lane i takes
// the elements i mod 8 of the whole blocks of eight), added in the tree
// ((0+1)+(2+3))+((4+5)+(6+7)), then the remainder in order; in double, or in float for the
// float32 form (bfloat16_values). 67 features: eight blocks and a tail.
template <typename T>
T lanes_then_tail(const std::vector<T>& terms) {
  T lane[8] = {};
  const size_t whole = terms.size() / 8 * 8;
  for (size_t d = 0; d < whole; ++d) lane[d % 8] += terms[d];
  T sum = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  for (size_t d = whole; d < terms.size(); ++d) sum += terms[d];
  return sum;
}

TEST(IsaLoops, LayerNormGivesTheScalarBits) {
  constexpr int64_t rows = 5, n = 67;
  constexpr double epsilon = 1e-3;
  const std::vector<float> x = finite_values(rows * n, 9), gamma = finite_values(n, 10),
                           beta = finite_values(n, 11);
  std::vector<float> want(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<double> row(x.begin() + r * n, x.begin() + (r + 1) * n);
    const double mu = lanes_then_tail(row) / static_cast<double>(n);
    std::vector<double> squares(n);
    for (int64_t d = 0; d < n; ++d) squares[d] = (row[d] - mu) * (row[d] - mu);
    const double rstd =
        1.0 / std::sqrt(lanes_then_tail(squares) / static_cast<double>(n) + epsilon);
    for (int64_t d = 0; d < n; ++d) {
      want[r * n + d] = static_cast<float>((row[d] - mu) * rstd * static_cast<double>(gamma[d]) +
                                           static_cast<double>(beta[d]));
    }
  }
  const Tensor tx = Tensor::from_vector(x, {rows, n}), tg = Tensor::from_vector(gamma, {n}),
               tb = Tensor::from_vector(beta, {n});
  const ops::LayerNormResult got = ops::layer_norm_forward(tx, tg, tb, epsilon);
  EXPECT_TRUE(same_bits(got.output.data<float>(), want.data(), want.size()));
  EXPECT_FALSE(got.output.holds_bfloat16_values());
}

// The float32 form's layer normalization (bfloat16_values) by its scalar definition: the same
// formulas with every intermediate a float, the sums in the same eight-lane order, each output
// stored as the bfloat16 rounding of its float.

TEST(IsaLoops, LayerNormOfBfloat16ValuesGivesTheScalarFloatBits) {
  constexpr int64_t rows = 5, n = 67;
  constexpr double epsilon = 1e-3;
  const std::vector<float> x = finite_values(rows * n, 9), gamma = finite_values(n, 10),
                           beta = finite_values(n, 11);
  std::vector<float> want(x.size());
  const float count = static_cast<float>(n);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> row(x.begin() + r * n, x.begin() + (r + 1) * n);
    const float mu = lanes_then_tail(row) / count;
    std::vector<float> squares(n);
    for (int64_t d = 0; d < n; ++d) squares[d] = (row[d] - mu) * (row[d] - mu);
    const float s =
        1.0f / std::sqrt(lanes_then_tail(squares) / count + static_cast<float>(epsilon));
    for (int64_t d = 0; d < n; ++d) {
      want[r * n + d] = round_to_bfloat16_value((row[d] - mu) * s * gamma[d] + beta[d]);
    }
  }
  const ops::LayerNormResult got =
      ops::layer_norm_forward(Tensor::from_vector(x, {rows, n}), Tensor::from_vector(gamma, {n}),
                              Tensor::from_vector(beta, {n}), epsilon, true);
  EXPECT_TRUE(same_bits(got.output.data<float>(), want.data(), want.size()));
  EXPECT_TRUE(got.output.holds_bfloat16_values());
}

TEST(IsaLoops, LayerNormGradientGivesTheScalarBits) {
  // The backward by its scalar definition (row_sums.h): xhat = (x - mean)·inv_std,
  // mean_g = Σ dy·g / n and mean_gx = Σ dy·g·xhat / n in the eight-lane order,
  // dx = inv_std·(dy·g - mean_g - xhat·mean_gx), in double; with bfloat16_values (the float32
  // form), in float with dy read rounded, dgamma and dbeta still summed over the rows in double.
  constexpr int64_t rows = 4, n = 67;
  const std::vector<float> x = finite_values(rows * n, 12), gamma = finite_values(n, 13),
                           dy = finite_values(rows * n, 14);
  const Tensor tx = Tensor::from_vector(x, {rows, n}), tg = Tensor::from_vector(gamma, {n});
  const ops::LayerNormResult fwd = ops::layer_norm_forward(tx, tg, Tensor(), 1e-3);
  for (bool round : {false, true}) {
    SCOPED_TRACE(round ? "bfloat16_values: in float, dy rounded as read" : "in double");
    std::vector<float> want(x.size());
    std::vector<double> dgamma(n, 0.0), dbeta(n, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      if (round) {
        const float mu = fwd.mean.data<float>()[r], s = fwd.inv_std.data<float>()[r];
        std::vector<float> vdy(n), dg(n), dgx(n);
        for (int64_t d = 0; d < n; ++d) {
          vdy[d] = round_to_bfloat16_value(dy[r * n + d]);
          dg[d] = vdy[d] * gamma[d];
          dgx[d] = dg[d] * ((x[r * n + d] - mu) * s);
        }
        const float mean_g = lanes_then_tail(dg) / static_cast<float>(n),
                    mean_gx = lanes_then_tail(dgx) / static_cast<float>(n);
        for (int64_t d = 0; d < n; ++d) {
          const float xhat = (x[r * n + d] - mu) * s;
          dgamma[d] += static_cast<double>(vdy[d] * xhat);
          dbeta[d] += static_cast<double>(vdy[d]);
          want[r * n + d] = s * (vdy[d] * gamma[d] - mean_g - xhat * mean_gx);
        }
        continue;
      }
      const double mu = fwd.mean.data<float>()[r], s = fwd.inv_std.data<float>()[r];
      std::vector<double> vdy(n), xhat(n), dg(n), dgx(n);
      for (int64_t d = 0; d < n; ++d) {
        vdy[d] = dy[r * n + d];
        xhat[d] = (static_cast<double>(x[r * n + d]) - mu) * s;
        dg[d] = vdy[d] * static_cast<double>(gamma[d]);
        dgx[d] = dg[d] * ((static_cast<double>(x[r * n + d]) - mu) * s);
      }
      const double mean_g = lanes_then_tail(dg) / n, mean_gx = lanes_then_tail(dgx) / n;
      for (int64_t d = 0; d < n; ++d) {
        dgamma[d] += vdy[d] * xhat[d];
        dbeta[d] += vdy[d];
        want[r * n + d] = static_cast<float>(
            s * (vdy[d] * static_cast<double>(gamma[d]) - mean_g - xhat[d] * mean_gx));
      }
    }
    const ops::NormGrads got = ops::layer_norm_backward(Tensor::from_vector(dy, {rows, n}), tx, tg,
                                                        fwd.mean, fwd.inv_std, round);
    EXPECT_TRUE(same_bits(got.x.data<float>(), want.data(), want.size()));
    for (int64_t d = 0; d < n; ++d) {
      EXPECT_EQ(got.gamma.data<float>()[d], static_cast<float>(dgamma[d])) << d;
      EXPECT_EQ(got.beta.data<float>()[d], static_cast<float>(dbeta[d])) << d;
    }
  }
}

// bfloat16 tensors normalize in float32, by the float32 form's definition above: the same
// output, mean, inverse deviation, dgamma and dbeta bits on the same values, and dx the bfloat16
// rounding of the float32 form's float dx.
TEST(IsaLoops, LayerNormOfBfloat16TensorsGivesTheFloat32FormsBits) {
  constexpr int64_t rows = 5, n = 67;
  constexpr double epsilon = 1e-3;
  auto rounded = [](std::vector<float> v) {
    for (float& e : v) e = round_to_bfloat16_value(e);
    return v;
  };
  const std::vector<float> x = rounded(finite_values(rows * n, 17)),
                           dy = rounded(finite_values(rows * n, 18)), gamma = finite_values(n, 19),
                           beta = finite_values(n, 20);
  const Tensor tx = Tensor::from_vector(x, {rows, n}), tdy = Tensor::from_vector(dy, {rows, n});
  const Tensor tg = Tensor::from_vector(gamma, {n}), tb = Tensor::from_vector(beta, {n});
  const ops::LayerNormResult want = ops::layer_norm_forward(tx, tg, tb, epsilon, true);
  const ops::NormGrads want_grads =
      ops::layer_norm_backward(tdy, tx, tg, want.mean, want.inv_std, true);

  const Tensor bx = tx.to(DType::bfloat16), bdy = tdy.to(DType::bfloat16);
  const ops::LayerNormResult got = ops::layer_norm_forward(bx, tg, tb, epsilon);
  ASSERT_EQ(got.output.dtype(), DType::bfloat16);
  EXPECT_TRUE(
      same_bits(got.output.to(DType::float32).data<float>(), want.output.data<float>(), x.size()));
  EXPECT_TRUE(same_bits(got.mean.data<float>(), want.mean.data<float>(), rows));
  EXPECT_TRUE(same_bits(got.inv_std.data<float>(), want.inv_std.data<float>(), rows));
  const ops::NormGrads grads = ops::layer_norm_backward(bdy, bx, tg, got.mean, got.inv_std);
  ASSERT_EQ(grads.x.dtype(), DType::bfloat16);
  const std::vector<float> want_dx = rounded(
      std::vector<float>(want_grads.x.data<float>(), want_grads.x.data<float>() + x.size()));
  EXPECT_TRUE(same_bits(grads.x.to(DType::float32).data<float>(), want_dx.data(), x.size()));
  EXPECT_TRUE(same_bits(grads.gamma.data<float>(), want_grads.gamma.data<float>(), n));
  EXPECT_TRUE(same_bits(grads.beta.data<float>(), want_grads.beta.data<float>(), n));
}

// A bias's gradient: each column of dy summed in float in the order of the rows (bfloat16 dy by
// its float values), then stored in dy's dtype.
TEST(IsaLoops, BiasGradientGivesTheScalarColumnSums) {
  constexpr int64_t rows = 37, cols = 45;  // whole vectors of every build and a tail
  const std::vector<float> dy = values(rows * cols, 21);
  for (DType dtype : {DType::float32, DType::bfloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor t = Tensor::from_vector(dy, {rows, cols}).to(dtype);
    const Tensor as_float = t.to(DType::float32);
    std::vector<float> want(cols, 0.0f);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) want[j] += as_float.data<float>()[i * cols + j];
    }
    const Tensor got = ops::bias_add_backward(t, false, true).dbias;
    ASSERT_EQ(got.dtype(), dtype);
    const Tensor want_t = Tensor::from_vector(want, {cols}).to(dtype).to(DType::float32);
    EXPECT_TRUE(same_bits(got.to(DType::float32).data<float>(), want_t.data<float>(), cols));
  }
}

TEST(IsaLoops, AddToBfloat16ValuesGivesTheRoundedScalarSum) {
  for (size_t n : {size_t{7}, size_t{333}, size_t{4101}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const std::vector<float> a = values(n, 15), b = values(n, 16);
    const int64_t len = static_cast<int64_t>(n);
    const Tensor y = ops::add_to_bfloat16_values_forward(Tensor::from_vector(a, {len}),
                                                         Tensor::from_vector(b, {len}));
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = round_to_bfloat16_value(a[i] + b[i]);
    EXPECT_TRUE(same_bits(y.data<float>(), want.data(), n));
    EXPECT_TRUE(y.holds_bfloat16_values());
  }
}

}  // namespace
}  // namespace lockstep
