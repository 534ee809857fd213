#include "attention_bf16_dot.h"

#include <algorithm>
#include <cstring>

#include "core/lane_transpose.h"
#include "core/vector_lanes.h"
#include "lockstep/core/check.h"
#include "lockstep/core/cpu_isa.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace lockstep::ops::detail {

#if defined(__x86_64__)

bool attention_bf16_dot_available() {
  static const bool available =
      effective_cpu_isa() >= CpuIsa::avx512_core_bf16 && loop_isa() == LoopIsa::x86_64_v4;
  return available;
}

// GCC 12 warns inside its own AVX-512 headers, whose intrinsics start from _mm512_undefined_*.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define LOCKSTEP_TARGET_BF16_DOT __attribute__((target("arch=x86-64-v4,avx512bf16")))

namespace {

// Terms k and k + 1 of a sum as one word, k's in the low half; without a second (k the last of
// an odd count) the high half is zero.
inline uint32_t pair_word(const uint16_t* p, bool two) {
  return two ? (uint32_t{p[0]} | uint32_t{p[1]} << 16) : uint32_t{p[0]};
}

LOCKSTEP_TARGET_BF16_DOT [[gnu::always_inline]] inline __m512bh broadcast_pair(uint32_t word) {
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(word)));
}

// NV vectors of 16 queries of key row s (a0) and, with TWO, s + 1 (a1).
template <int NV, bool TWO>
LOCKSTEP_TARGET_BF16_DOT [[gnu::always_inline]] inline void scores_rows(
    const uint16_t* a0, const uint16_t* a1, int64_t D, const uint32_t* pairs, int64_t ld,
    __m512 alpha, float* y0, float* y1) {
  __m512 acc0[NV], acc1[NV];
  for (int u = 0; u < NV; ++u) acc0[u] = acc1[u] = _mm512_setzero_ps();
  const int64_t D2 = (D + 1) / 2;
  for (int64_t i = 0; i < D2; ++i) {
    const bool two = 2 * i + 1 < D;
    const __m512bh x0 = broadcast_pair(pair_word(a0 + 2 * i, two));
    const __m512bh x1 = TWO ? broadcast_pair(pair_word(a1 + 2 * i, two)) : x0;
    for (int u = 0; u < NV; ++u) {
      const __m512bh v = reinterpret_cast<__m512bh>(_mm512_loadu_si512(pairs + i * ld + 16 * u));
      acc0[u] = _mm512_dpbf16_ps(acc0[u], x0, v);
      if (TWO) acc1[u] = _mm512_dpbf16_ps(acc1[u], x1, v);
    }
  }
  for (int u = 0; u < NV; ++u) {
    _mm512_storeu_ps(y0 + 16 * u, _mm512_mul_ps(acc0[u], alpha));
    if (TWO) _mm512_storeu_ps(y1 + 16 * u, _mm512_mul_ps(acc1[u], alpha));
  }
}

template <int NV>
LOCKSTEP_TARGET_BF16_DOT [[gnu::always_inline]] inline void scores_columns(
    const uint16_t* a, int64_t a_rs, int64_t S, int64_t D, const uint32_t* pairs, int64_t ld,
    __m512 alpha, float* yt) {
  int64_t s = 0;
  for (; s + 2 <= S; s += 2) {
    scores_rows<NV, true>(a + s * a_rs, a + (s + 1) * a_rs, D, pairs, ld, alpha, yt + s * ld,
                          yt + (s + 1) * ld);
  }
  if (s < S) scores_rows<NV, false>(a + s * a_rs, a, D, pairs, ld, alpha, yt + s * ld, yt);
}

// R output rows from row 0 of the packed weights (rows pi words apart, pairs pj), the 16 (or, by
// the mask, fewer) features of x_pairs from column c.
template <int R>
LOCKSTEP_TARGET_BF16_DOT [[gnu::always_inline]] inline void weighted_block(
    const uint32_t* wp, int64_t pi, int64_t pj, int64_t J2, const uint32_t* xp, int64_t D,
    __mmask16 mask, __m512 alpha, uint16_t* y, int64_t y_rs) {
  __m512 acc[R];
  for (int u = 0; u < R; ++u) acc[u] = _mm512_setzero_ps();
  for (int64_t j2 = 0; j2 < J2; ++j2) {
    const __m512bh v = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi32(mask, xp + j2 * D));
    const uint32_t* w = wp + j2 * pj;
    for (int u = 0; u < R; ++u) acc[u] = _mm512_dpbf16_ps(acc[u], broadcast_pair(w[u * pi]), v);
  }
  for (int u = 0; u < R; ++u) {
    const __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_mul_ps(acc[u], alpha)));
    _mm256_mask_storeu_epi16(y + u * y_rs, mask, h);
  }
}

// The bfloat16 bits of float32 values holding bfloat16 values: their upper halves, exactly (no
// conversion, which would read a subnormal as zero).
LOCKSTEP_TARGET_BF16_DOT [[gnu::always_inline]] inline __m512i upper_halves_low(__m512i v) {
  return _mm512_srli_epi32(v, 16);
}

// w's pairs along j: word (i, j2) holds w[i, 2·j2] (low half) and w[i, 2·j2 + 1]; returns their
// layout (pi, pj: words between rows i and between pairs j2).
LOCKSTEP_TARGET_BF16_DOT void pack_weights(const float* w, int64_t wi, int64_t wj, int64_t I,
                                           int64_t J, uint32_t* out, int64_t& pi, int64_t& pj) {
  const int64_t J2 = (J + 1) / 2;
  auto bits = [](const float* p) {
    uint32_t u;
    std::memcpy(&u, p, sizeof u);
    return u;
  };
  if (wi == 1) {
    // Transposed weights (rows of w run along i): 16 rows i at a time, from two of its rows.
    const int64_t I16 = (I + 15) / 16 * 16;
    pi = 1;
    pj = I16;
    const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    for (int64_t j2 = 0; j2 < J2; ++j2) {
      const float* r0 = w + 2 * j2 * wj;
      const bool two = 2 * j2 + 1 < J;
      uint32_t* o = out + j2 * I16;
      for (int64_t i = 0; i < I16; i += 16) {
        const __mmask16 m =
            static_cast<__mmask16>(i + 16 <= I ? 0xffff : (1u << std::max<int64_t>(0, I - i)) - 1);
        const __m512i lo = upper_halves_low(_mm512_maskz_loadu_epi32(m, r0 + i));
        const __m512i hi =
            two ? _mm512_and_si512(_mm512_maskz_loadu_epi32(m, r0 + wj + i), high_half)
                : _mm512_setzero_si512();
        _mm512_storeu_si512(o + i, _mm512_or_si512(lo, hi));
      }
    }
    return;
  }
  pi = J2;
  pj = 1;
  for (int64_t i = 0; i < I; ++i) {
    const float* r = w + i * wi;
    uint32_t* o = out + i * J2;
    int64_t j2 = 0;
    if (wj == 1) {
      // Rows along j: 8 pairs from 16 adjacent values, through 64-bit lanes holding two.
      const __m512i low_mask = _mm512_set1_epi64(0xffff);
      const __m512i high_mask = _mm512_set1_epi64(0xffff0000);
      for (; 2 * j2 + 16 <= J; j2 += 8) {
        const __m512i q = _mm512_loadu_si512(r + 2 * j2);
        const __m512i word = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi64(q, 16), low_mask),
                                             _mm512_and_si512(_mm512_srli_epi64(q, 32), high_mask));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + j2), _mm512_cvtepi64_epi32(word));
      }
    }
    for (; j2 < J2; ++j2) {
      const uint32_t lo = bits(r + 2 * j2 * wj) >> 16;
      const uint32_t hi = 2 * j2 + 1 < J ? bits(r + (2 * j2 + 1) * wj) & 0xffff0000u : 0u;
      o[j2] = lo | hi;
    }
  }
}

}  // namespace

LOCKSTEP_TARGET_BF16_DOT void scores_bf16_dot(const uint16_t* a, int64_t a_rs, int64_t S,
                                              const uint16_t* b, int64_t b_rs, int64_t T, int64_t D,
                                              int64_t ld, float alpha, uint32_t* pairs, float* yt) {
  LOCKSTEP_CHECK(ld % 16 == 0 && ld >= T, "scores_bf16_dot: expected ld a multiple of 16, >= ", T,
                 ". Received: ", ld, ".");
  // pairs[i, t] is word i of b's row t (its features 2i and 2i + 1 are adjacent): b's rows as
  // words, transposed 16 × 16 at a time in registers; the half past an odd D's last is zero.
  using Words = ::lockstep::detail::Lanes<16>::F;
  const int64_t D2 = (D + 1) / 2;
  for (int64_t i0 = 0; i0 < D2; i0 += 16) {
    const int64_t words = std::min<int64_t>(16, D2 - i0),
                  halves = std::min<int64_t>(32, D - 2 * i0);
    const __mmask32 m = halves == 32 ? ~__mmask32{0} : (__mmask32{1} << halves) - 1;
    for (int64_t t0 = 0; t0 < ld; t0 += 16) {
      Words r[16];
      for (int64_t k = 0; k < 16; ++k) {
        r[k] = reinterpret_cast<Words>(
            t0 + k < T ? _mm512_maskz_loadu_epi16(m, b + (t0 + k) * b_rs + 2 * i0)
                       : _mm512_setzero_si512());
      }
      ::lockstep::detail::lane_transpose::transpose<16>(r);
      for (int64_t i = 0; i < words; ++i)
        _mm512_storeu_si512(pairs + (i0 + i) * ld + t0, reinterpret_cast<__m512i>(r[i]));
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
  for (int64_t j = 0; j < ld; j += 64) {
    switch (std::min<int64_t>(4, (ld - j) / 16)) {
      case 4:
        scores_columns<4>(a, a_rs, S, D, pairs + j, ld, al, yt + j);
        break;
      case 3:
        scores_columns<3>(a, a_rs, S, D, pairs + j, ld, al, yt + j);
        break;
      case 2:
        scores_columns<2>(a, a_rs, S, D, pairs + j, ld, al, yt + j);
        break;
      default:
        scores_columns<1>(a, a_rs, S, D, pairs + j, ld, al, yt + j);
        break;
    }
  }
}

LOCKSTEP_TARGET_BF16_DOT void weighted_rows_bf16_dot(const float* w, int64_t wi, int64_t wj,
                                                     int64_t I, int64_t J, const uint16_t* x,
                                                     int64_t x_rs, int64_t D, float alpha,
                                                     uint16_t* y, int64_t y_rs, uint32_t* w_pairs,
                                                     uint32_t* x_pairs) {
  const int64_t J2 = (J + 1) / 2;
  for (int64_t j2 = 0; j2 < J2; ++j2) {
    const uint16_t* r0 = x + 2 * j2 * x_rs;
    const bool two = 2 * j2 + 1 < J;
    uint32_t* o = x_pairs + j2 * D;
    int64_t c = 0;
    for (; c + 16 <= D; c += 16) {
      const __m512i lo =
          _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + c)));
      const __m512i hi =
          two ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                      reinterpret_cast<const __m256i*>(r0 + x_rs + c))),
                                  16)
              : _mm512_setzero_si512();
      _mm512_storeu_si512(o + c, _mm512_or_si512(lo, hi));
    }
    for (; c < D; ++c) o[c] = uint32_t{r0[c]} | (two ? uint32_t{r0[x_rs + c]} << 16 : 0u);
  }
  int64_t pi = 0, pj = 0;
  pack_weights(w, wi, wj, I, J, w_pairs, pi, pj);
  const __m512 al = _mm512_set1_ps(alpha);
  for (int64_t c = 0; c < D; c += 16) {
    const __mmask16 mask =
        static_cast<__mmask16>(c + 16 <= D ? 0xffff : (1u << static_cast<unsigned>(D - c)) - 1);
    const uint32_t* xp = x_pairs + c;
    int64_t i = 0;
    for (; i + 8 <= I; i += 8)
      weighted_block<8>(w_pairs + i * pi, pi, pj, J2, xp, D, mask, al, y + i * y_rs + c, y_rs);
    if (i + 4 <= I) {
      weighted_block<4>(w_pairs + i * pi, pi, pj, J2, xp, D, mask, al, y + i * y_rs + c, y_rs);
      i += 4;
    }
    for (; i < I; ++i)
      weighted_block<1>(w_pairs + i * pi, pi, pj, J2, xp, D, mask, al, y + i * y_rs + c, y_rs);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#else  // no AVX512_BF16 off x86-64

bool attention_bf16_dot_available() {
  return false;
}

void scores_bf16_dot(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, int64_t, int64_t,
                     int64_t, float, uint32_t*, float*) {
  LOCKSTEP_CHECK(false, "scores_bf16_dot: AVX512_BF16 is x86-64 only.");
}

void weighted_rows_bf16_dot(const float*, int64_t, int64_t, int64_t, int64_t, const uint16_t*,
                            int64_t, int64_t, float, uint16_t*, int64_t, uint32_t*, uint32_t*) {
  LOCKSTEP_CHECK(false, "weighted_rows_bf16_dot: AVX512_BF16 is x86-64 only.");
}

#endif

}  // namespace lockstep::ops::detail
