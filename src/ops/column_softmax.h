#pragma once
// Softmax down the columns of a row-major matrix, a vector of columns at a time: the lanes are
// independent softmaxes, so no reduction crosses lanes and a build's vector width changes no bit.
// Written over GCC vector types of W float32 lanes, for the bodies of LOCKSTEP_DISPATCHED_LANES
// loops (core/cpu_dispatch.h): the attention's softmax over the key axis (attention.cpp) and a
// softmax over a short class axis (softmax.cpp), which transposes its rows into columns first.
#include <cstdint>
#include <cstring>

#include "core/vector_lanes.h"

namespace lockstep::ops::column_softmax {

// GCC vector extensions of W float32 lanes (core/vector_lanes.h). Every loop below computes each
// lane on its own, so the width changes no result: the three builds give the same bits.
template <int W>
using Lanes = ::lockstep::detail::Lanes<W>;

template <typename V>
[[gnu::always_inline]] inline void load(V& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}
template <typename V>
[[gnu::always_inline]] inline void store(float* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

// e^x for x <= 0 (Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, a polynomial for e^r, scaled by
// 2^n through the exponent bits; ~1 ulp), exactly 0 below -87 (where float32's e^x would be
// denormal) so that dropped scores get probability 0.
template <int W>
[[gnu::always_inline]] inline void exp_nonpositive(typename Lanes<W>::F& x) {
  using F = typename Lanes<W>::F;
  using I = typename Lanes<W>::I;
  const F lo = F{} - 87.0f;
  const I under = x < lo;
  x = under ? lo : x;
  const F n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  const F r = x - n * 0.693359375f - n * -2.12194440e-4f;
  F p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const I scale = (__builtin_convertvector(n, I) + 127) << 23;
  x = (F)((I)(p * (F)scale) & ~under);
}

// v rounded to bfloat16 values (kept in float32; round to nearest even, NaN stays a quiet NaN),
// as round_to_bfloat16_value.
template <int W>
[[gnu::always_inline]] inline void round_lanes_to_bfloat16(typename Lanes<W>::F& v) {
  using U = typename Lanes<W>::U;
  const U u = (U)v;
  const U rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  const U quiet_nan = (u | 0x00400000u) & 0xffff0000u;
  v = (typename Lanes<W>::F)((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// The softmax of N adjacent vectors of columns (from column j) of one matrix [rows, ld]; see
// softmax_columns_f32. N = 2 gives the core two independent exponentials per row to overlap (the
// polynomial is a chain of dependent multiplies and adds); each lane's operations and their order
// are those of N = 1.
template <int W, int N>
[[gnu::always_inline]] inline void softmax_column_vectors(float* __restrict x, int64_t rows,
                                                          int64_t ld, int64_t j,
                                                          float* __restrict rounded) {
  using F = typename Lanes<W>::F;
  F v, m[N], sum[N];
  // Each vector's max in four chains (rows 1, 5, 9, ... in the first), each started from row 0:
  // the serial fold's value (it too skips NaN except in row 0, which every chain keeps), up to the
  // sign of a zero max, which no difference x − max and so no probability sees.
  F m4[N][4];
  for (int q = 0; q < N; ++q) {
    load(v, x + j + q * W);
    for (auto& e : m4[q]) e = v;
  }
  int64_t r = 1;
  for (; r + 4 <= rows; r += 4) {
    for (int k = 0; k < 4; ++k) {
      for (int q = 0; q < N; ++q) {
        load(v, x + (r + k) * ld + j + q * W);
        m4[q][k] = v > m4[q][k] ? v : m4[q][k];
      }
    }
  }
  for (int k = 0; r < rows; ++r, ++k) {
    for (int q = 0; q < N; ++q) {
      load(v, x + r * ld + j + q * W);
      m4[q][k] = v > m4[q][k] ? v : m4[q][k];
    }
  }
  for (int q = 0; q < N; ++q) {
    m[q] = m4[q][0];
    for (int k = 1; k < 4; ++k) m[q] = m4[q][k] > m[q] ? m4[q][k] : m[q];
    sum[q] = F{};
  }
  for (r = 0; r < rows; ++r) {
    for (int q = 0; q < N; ++q) {
      load(v, x + r * ld + j + q * W);
      v -= m[q];
      exp_nonpositive<W>(v);
      sum[q] += v;
      store(x + r * ld + j + q * W, v);
    }
  }
  F inv[N];
  for (int q = 0; q < N; ++q) inv[q] = 1.0f / sum[q];
  for (r = 0; r < rows; ++r) {
    for (int q = 0; q < N; ++q) {
      load(v, x + r * ld + j + q * W);
      v *= inv[q];
      store(x + r * ld + j + q * W, v);
      if (rounded) {
        round_lanes_to_bfloat16<W>(v);
        store(rounded + r * ld + j + q * W, v);
      }
    }
  }
}

// The softmax down every column of one matrix [rows, ld] (ld whole vectors of W), in place: two
// vectors at a time, then the last one alone. With `rounded`, as softmax_column_vectors.
template <int W>
[[gnu::always_inline]] inline void softmax_columns(float* __restrict x, int64_t rows, int64_t ld,
                                                   float* __restrict rounded) {
  int64_t j = 0;
  for (; j + 2 * W <= ld; j += 2 * W) softmax_column_vectors<W, 2>(x, rows, ld, j, rounded);
  if (j < ld) softmax_column_vectors<W, 1>(x, rows, ld, j, rounded);
}

}  // namespace lockstep::ops::column_softmax
