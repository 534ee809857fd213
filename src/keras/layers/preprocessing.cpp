#include "lockstep/keras/layers/preprocessing.h"

#include "core/cpu_dispatch.h"
#include "lockstep/autodiff/functions.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "lockstep/core/cpu_isa.h"
#include "lockstep/keras/mixed_precision.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace lockstep::keras::layers {

namespace {
// Written once for every integer input type and built for each ISA level (cpu_dispatch.h); no
// FMA contraction, so every build gives the float32 product-then-sum of the scalar definition,
// bit for bit.
template <typename T>
[[gnu::always_inline]] inline void rescale_to_float(const T* __restrict x, float* __restrict y,
                                                    int64_t n, float scale, float offset) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i]) * scale + offset;
}
// Under a bfloat16 compute dtype the result is rounded as it is written (the same round-to-nearest-
// even as a float32 pass followed by a conversion, without the float32 intermediate). The rounding
// is bfloat16::round_from_float without its branch, so the loop vectorises (the branchy
// constructor made this pass several times slower than the float32 one).
template <typename T>
[[gnu::always_inline]] inline void rescale_to_bfloat16(const T* __restrict x,
                                                       bfloat16* __restrict y, int64_t n,
                                                       float scale, float offset) {
  uint16_t* out = reinterpret_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) {
    const float f = static_cast<float>(x[i]) * scale + offset;
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x0040u;
    out[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
}

LOCKSTEP_DISPATCHED(void, rescale_into,
                    (const uint8_t* __restrict x, float* __restrict y, int64_t n, float scale,
                     float offset),
                    (x, y, n, scale, offset)) {
  rescale_to_float(x, y, n, scale, offset);
}
LOCKSTEP_DISPATCHED(void, rescale_into,
                    (const int32_t* __restrict x, float* __restrict y, int64_t n, float scale,
                     float offset),
                    (x, y, n, scale, offset)) {
  rescale_to_float(x, y, n, scale, offset);
}
LOCKSTEP_DISPATCHED(void, rescale_into,
                    (const int64_t* __restrict x, float* __restrict y, int64_t n, float scale,
                     float offset),
                    (x, y, n, scale, offset)) {
  rescale_to_float(x, y, n, scale, offset);
}
LOCKSTEP_DISPATCHED(void, rescale_into,
                    (const int32_t* __restrict x, bfloat16* __restrict y, int64_t n, float scale,
                     float offset),
                    (x, y, n, scale, offset)) {
  rescale_to_bfloat16(x, y, n, scale, offset);
}
LOCKSTEP_DISPATCHED(void, rescale_into,
                    (const int64_t* __restrict x, bfloat16* __restrict y, int64_t n, float scale,
                     float offset),
                    (x, y, n, scale, offset)) {
  rescale_to_bfloat16(x, y, n, scale, offset);
}
LOCKSTEP_DISPATCHED(void, rescale_any_into,
                    (const uint8_t* __restrict x, bfloat16* __restrict y, int64_t n, float scale,
                     float offset),
                    (x, y, n, scale, offset)) {
  rescale_to_bfloat16(x, y, n, scale, offset);
}

// The same for results known to be finite (uint8 inputs, finite scale and offset, no overflow):
// the NaN select is the loop's costliest part (docs/performance.md, "Measured design choices").
LOCKSTEP_DISPATCHED(void, rescale_finite_into,
                    (const uint8_t* __restrict x, bfloat16* __restrict y, int64_t n, float scale,
                     float offset),
                    (x, y, n, scale, offset)) {
  uint16_t* out = reinterpret_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) {
    const float f = static_cast<float>(x[i]) * scale + offset;
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    out[i] = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
}

// The policy's float32 form (Layer::computes_bfloat16_in_float32): the bfloat16 rounding of the
// same value, kept in float32, as it is written; without the NaN select for finite results.
LOCKSTEP_DISPATCHED(void, rescale_rounded_any_into,
                    (const uint8_t* __restrict x, float* __restrict y, int64_t n, float scale,
                     float offset),
                    (x, y, n, scale, offset)) {
  for (int64_t i = 0; i < n; ++i) {
    y[i] = round_to_bfloat16_value(static_cast<float>(x[i]) * scale + offset);
  }
}
LOCKSTEP_DISPATCHED(void, rescale_rounded_finite_into,
                    (const uint8_t* __restrict x, float* __restrict y, int64_t n, float scale,
                     float offset),
                    (x, y, n, scale, offset)) {
  for (int64_t i = 0; i < n; ++i) {
    const float f = static_cast<float>(x[i]) * scale + offset;
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    std::memcpy(&y[i], &u, sizeof u);
  }
}

bool rescale_stays_finite(float scale, float offset) {
  // |x * scale + offset| <= 255 |scale| + |offset| (plus float32 rounding): far from overflow.
  const double bound = 255.0 * std::fabs(static_cast<double>(scale)) + std::fabs(offset);
  return std::isfinite(scale) && std::isfinite(offset) && bound < 1e38;
}

void rescale_rounded_into(const uint8_t* x, float* y, int64_t n, float scale, float offset) {
  if (rescale_stays_finite(scale, offset)) {
    rescale_rounded_finite_into(x, y, n, scale, offset);
  } else {
    rescale_rounded_any_into(x, y, n, scale, offset);
  }
}

#if defined(__x86_64__)
// AVX512_BF16's conversion (vcvtneps2bf16) rounds to nearest even as bfloat16::round_from_float
// does, but reads a subnormal input as zero; with uint8 inputs, no offset and a scale that is 0 or
// at least FLT_MIN in magnitude, every product is 0 or normal (and finite: rescale_stays_finite),
// so it gives the same bits as the loop above in one instruction per 16 values. (GCC 12 warns
// inside its own AVX-512 headers, whose intrinsics start from _mm512_undefined_*.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("arch=x86-64-v4,avx512bf16"))) void rescale_uint8_with_avx512_bf16(
    const uint8_t* x, bfloat16* y, int64_t n, float scale) {
  const __m512 s = _mm512_set1_ps(scale), zero = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    // + 0: the scalar definition's offset, which turns a -0 product (a negative scale) into +0.
    const __m512 f =
        _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes)), s), zero);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(f)));
  }
  for (; i < n; ++i) y[i] = bfloat16(static_cast<float>(x[i]) * scale + 0.0f);
}

// The same rescaling of a [rows, cols] matrix of bytes, written twice: as it is to y and
// transposed to yt ([cols, rows]), for a training step whose next layer multiplies it transposed
// (its kernel's gradient xᵀ·dz, which oneDNN's bfloat16 kernels read from a dense xᵀ in about two
// thirds of the time they take through a strided view). Tiles of 32 × 32: each row of a tile
// becomes one vector of 32 bfloat16 values (the conversion above, bit for bit), then four
// groups of eight rows are transposed within their 128-bit lanes by three rounds of unpacks and
// the groups' lanes exchanged by two rounds of 128-bit shuffles: 160 single-uop shuffles a tile,
// with the groups' halfway results parked in L1 so that no more than 16 vectors are live.
#define LOCKSTEP_UNROLL _Pragma("GCC unroll 32")
__attribute__((target("arch=x86-64-v4,avx512bf16"), always_inline)) inline void transpose_8_rows(
    __m512i (&r)[8]) {
  __m512i t[8];
  LOCKSTEP_UNROLL for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm512_unpacklo_epi16(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_epi16(r[2 * k], r[2 * k + 1]);
  }
  LOCKSTEP_UNROLL for (int k = 0; k < 2; ++k) {
    LOCKSTEP_UNROLL for (int h = 0; h < 2; ++h) {
      r[4 * k + 2 * h] = _mm512_unpacklo_epi32(t[4 * k + h], t[4 * k + 2 + h]);
      r[4 * k + 2 * h + 1] = _mm512_unpackhi_epi32(t[4 * k + h], t[4 * k + 2 + h]);
    }
  }
  // After this round r[q]'s 128-bit lane L holds the eight rows' values of column 8 L + q.
  LOCKSTEP_UNROLL for (int h = 0; h < 4; ++h) {
    t[2 * h] = _mm512_unpacklo_epi64(r[h], r[4 + h]);
    t[2 * h + 1] = _mm512_unpackhi_epi64(r[h], r[4 + h]);
  }
  LOCKSTEP_UNROLL for (int q = 0; q < 8; ++q) r[q] = t[q];
}

template <bool kWhole>
__attribute__((target("arch=x86-64-v4,avx512bf16"), always_inline)) inline void rescale_tile(
    const uint8_t* x, int64_t cols, int64_t rows, int64_t nr, int64_t w, __m512 s, bfloat16* y,
    bfloat16* yt) {
  const __m512 zero = _mm512_setzero_ps();
  const __mmask32 col_mask =
      kWhole ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << w) - 1);
  const __mmask32 row_mask =
      kWhole ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << nr) - 1);
  alignas(64) __m512i lanes[4][8];
  LOCKSTEP_UNROLL for (int g = 0; g < 4; ++g) {
    __m512i r[8];
    LOCKSTEP_UNROLL for (int i = 0; i < 8; ++i) {
      const int64_t row = 8 * g + i;
      if (!kWhole && row >= nr) {
        r[i] = _mm512_setzero_si512();
        continue;
      }
      const __m256i bytes = _mm256_maskz_loadu_epi8(col_mask, x + row * cols);
      // + 0 as in the loop above: a -0 product becomes +0.
      const __m512 lo = _mm512_add_ps(
          _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(bytes))), s),
          zero);
      const __m512 hi = _mm512_add_ps(
          _mm512_mul_ps(
              _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(bytes, 1))), s),
          zero);
      r[i] = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
      _mm512_mask_storeu_epi16(y + row * cols, col_mask, r[i]);
    }
    transpose_8_rows(r);
    LOCKSTEP_UNROLL for (int q = 0; q < 8; ++q) lanes[g][q] = r[q];
  }
  // Column 8 p + q gathers lane p of lanes[0..3][q]: a 4 × 4 transpose of 128-bit lanes.
  LOCKSTEP_UNROLL for (int q = 0; q < 8; ++q) {
    const __m512i b0 = _mm512_shuffle_i64x2(lanes[0][q], lanes[1][q], 0x44);
    const __m512i b1 = _mm512_shuffle_i64x2(lanes[0][q], lanes[1][q], 0xEE);
    const __m512i b2 = _mm512_shuffle_i64x2(lanes[2][q], lanes[3][q], 0x44);
    const __m512i b3 = _mm512_shuffle_i64x2(lanes[2][q], lanes[3][q], 0xEE);
    const __m512i col[4] = {_mm512_shuffle_i64x2(b0, b2, 0x88), _mm512_shuffle_i64x2(b0, b2, 0xDD),
                            _mm512_shuffle_i64x2(b1, b3, 0x88), _mm512_shuffle_i64x2(b1, b3, 0xDD)};
    LOCKSTEP_UNROLL for (int p = 0; p < 4; ++p) {
      const int64_t c = 8 * p + q;
      if (!kWhole && c >= w) continue;
      _mm512_mask_storeu_epi16(yt + c * rows, row_mask, col[p]);
    }
  }
}

__attribute__((target("arch=x86-64-v4,avx512bf16"))) void rescale_uint8_transposed_with_avx512_bf16(
    const uint8_t* x, int64_t rows, int64_t cols, float scale, bfloat16* y, bfloat16* yt) {
  const __m512 s = _mm512_set1_ps(scale);
  for (int64_t i0 = 0; i0 < rows; i0 += 32) {
    const int64_t nr = std::min<int64_t>(32, rows - i0);
    for (int64_t j0 = 0; j0 < cols; j0 += 32) {
      const int64_t w = std::min<int64_t>(32, cols - j0);
      const uint8_t* src = x + i0 * cols + j0;
      bfloat16* dst = y + i0 * cols + j0;
      bfloat16* dst_t = yt + j0 * rows + i0;
      if (nr == 32 && w == 32) {
        rescale_tile<true>(src, cols, rows, nr, w, s, dst, dst_t);
      } else {
        rescale_tile<false>(src, cols, rows, nr, w, s, dst, dst_t);
      }
    }
  }
}
#undef LOCKSTEP_UNROLL
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

bool uses_avx512_bf16_rescale(float scale, float offset) {
  static const bool available = effective_cpu_isa() >= CpuIsa::avx512_core_bf16;
  return available && offset == 0.0f && (scale == 0.0f || std::fabs(scale) >= FLT_MIN);
}

// The bytes' rescaling runs as the one-instruction conversion above (the same bits as the loop).
bool rescales_with_avx512_bf16(float scale, float offset) {
  return rescale_stays_finite(scale, offset) && uses_avx512_bf16_rescale(scale, offset);
}
#endif

#if defined(__x86_64__)
// Whether Rescaling writes its bfloat16 output's transpose beside it (Tensor::transposed_copy)
// for a training step: uint8 rows, the AVX512_BF16 conversion, and the mixed-precision switch on.
bool writes_transposed_copy(const Tensor& in, float scale, float offset) {
  return in.dtype() == DType::uint8 && in.rank() == 2 && in.num_elements() > 0 &&
         mixed_precision::transposed_input_copies() && rescales_with_avx512_bf16(scale, offset);
}
#endif

void rescale_into(const uint8_t* x, bfloat16* y, int64_t n, float scale, float offset) {
#if defined(__x86_64__)
  if (rescales_with_avx512_bf16(scale, offset)) {
    rescale_uint8_with_avx512_bf16(x, y, n, scale);
    return;
  }
#endif
  if (rescale_stays_finite(scale, offset)) {
    rescale_finite_into(x, y, n, scale, offset);
  } else {
    rescale_any_into(x, y, n, scale, offset);
  }
}

template <typename Out>
void rescale_integers(const Tensor& in, Out* y, float scale, float offset,
                      const std::string& name) {
  int64_t n = in.num_elements();
  switch (in.dtype()) {
    case DType::uint8:
      rescale_into(in.data<uint8_t>(), y, n, scale, offset);
      break;
    case DType::int32:
      rescale_into(in.data<int32_t>(), y, n, scale, offset);
      break;
    case DType::int64:
      rescale_into(in.data<int64_t>(), y, n, scale, offset);
      break;
    default:
      throw InvalidArgument("Rescaling '" + name + "': unsupported input " + in.describe() + ".");
  }
}
}  // namespace

Rescaling::Rescaling(RescalingOptions options)
    : LayerImpl(options.name, "rescaling", options.dtype), options_(options) {}

Tensor Rescaling::call(const Tensor& inputs, [[maybe_unused]] bool training) {
  if (is_floating(inputs.dtype())) {
    Tensor x = autocast(inputs);
    Tensor y = mul(x, Tensor::scalar(options_.scale, x.dtype()));
    return options_.offset == 0.0 ? y : add(y, Tensor::scalar(options_.offset, x.dtype()));
  }
  float scale = static_cast<float>(options_.scale), offset = static_cast<float>(options_.offset);
  if (compute_dtype() == DType::bfloat16) {
#if defined(__x86_64__)
    if (training && detail::LayerCallScope::current_output_read_transposed() &&
        writes_transposed_copy(inputs, scale, offset)) {
      Tensor y = Tensor::with_room_for_transpose(inputs.dim(0), inputs.dim(1), DType::bfloat16);
      rescale_uint8_transposed_with_avx512_bf16(inputs.data<uint8_t>(), inputs.dim(0),
                                                inputs.dim(1), scale, y.data<bfloat16>(),
                                                y.transpose_room().data<bfloat16>());
      y.mark_transposed_copy();
      return y;
    }
#endif
    Tensor y(inputs.shape(), DType::bfloat16);
    rescale_integers(inputs, y.data<bfloat16>(), scale, offset, name());
    return y;
  }
  Tensor y(inputs.shape(), DType::float32);
  if (computes_bfloat16_in_float32() && inputs.dtype() == DType::uint8) {
    rescale_rounded_into(inputs.data<uint8_t>(), y.data<float>(), inputs.num_elements(), scale,
                         offset);
    y.mark_bfloat16_values();
    return y;
  }
  rescale_integers(inputs, y.data<float>(), scale, offset, name());
  if (computes_bfloat16_in_float32()) {
    // Rounded in place while the block is still in cache; no gradient flows to integers.
    round_to_bfloat16_values(y.data<float>(), y.data<float>(),
                             static_cast<size_t>(y.num_elements()));
    y.mark_bfloat16_values();
  }
  return compute_dtype() == DType::float32 ? y : y.to(compute_dtype());
}

nlohmann::json Rescaling::get_config() const {
  auto c = Layer::get_config();
  c["scale"] = options_.scale;
  c["offset"] = options_.offset;
  return c;
}

}  // namespace lockstep::keras::layers
