// relu's gradient and the bias gradient of a Dense layer in one pass over dz (linear_backward's
// hot path): dz = dy ⊙ [y > 0] and dbias[j] = Σ_i dz[i, j], each row added in order, exactly as
// activation_grad_into followed by column_sums_into compute them (same bits), without reading dz a
// second time.
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/cpu_dispatch.h"
#include "core/vector_lanes.h"

#include "internal.h"
#include "kernel_util.h"

namespace lockstep::ops::detail {
namespace {

float float_of_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Each loop runs down the rows over a band of kBand vectors of columns, the band's column sums
// held in registers: summed through memory, every row's sum would wait on the store of the row
// before (a store-to-load round trip per row and vector). Each column is still added row by row
// in order, so the band changes no bit; columns past the last whole band go one at a time.
constexpr int kBand = 4;

template <int W>
using Lanes = ::lockstep::detail::Lanes<W>;

// By reference: a vector returned by value would change the baseline build's ABI.
template <typename V, typename T>
[[gnu::always_inline]] inline void load(V& v, const T* p) {
  std::memcpy(&v, p, sizeof v);
}
template <typename V, typename T>
[[gnu::always_inline]] inline void store(T* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

// The whole bands: row_band(at, sum) computes one row's band of dz from element `at` on and adds
// its kBand vectors into sum; the band's sums then go to acc. Returns the first column past them.
template <int W, typename RowBand>
[[gnu::always_inline]] inline int64_t band_sums(int64_t rows, int64_t cols, float* acc,
                                                RowBand&& row_band) {
  using F = typename Lanes<W>::F;
  constexpr int64_t kWidth = int64_t{kBand} * W;
  int64_t j0 = 0;
  for (; j0 + kWidth <= cols; j0 += kWidth) {
    F sum[kBand] = {};
    for (int64_t i = 0; i < rows; ++i) row_band(i * cols + j0, sum);
    for (int b = 0; b < kBand; ++b) store(acc + j0 + b * W, sum[b]);
  }
  return j0;
}

// The columns from j0 on, one at a time: element(k) writes dz[k] and returns what the sum adds.
template <typename Element>
[[gnu::always_inline]] inline void column_sums_from(int64_t rows, int64_t cols, int64_t j0,
                                                    float* acc, Element&& element) {
  for (int64_t j = j0; j < cols; ++j) {
    float sum = 0.0f;
    for (int64_t i = 0; i < rows; ++i) sum += element(i * cols + j);
    acc[j] = sum;
  }
}

// float32: dz = dy · (y > 0 ? 1 : 0) (NaN dy stays NaN, as the separate kernel).
LOCKSTEP_DISPATCHED_LANES(void, relu_bias_grad_f32,
                          (const float* __restrict dy, const float* __restrict y,
                           float* __restrict dz, float* __restrict acc, int64_t rows, int64_t cols),
                          (dy, y, dz, acc, rows, cols)) {
  using F = typename Lanes<kFloatLanes>::F;
  using U = typename Lanes<kFloatLanes>::U;
  const F one = F{} + 1.0f;
  const int64_t j0 = band_sums<kFloatLanes>(rows, cols, acc, [&](int64_t at, F* sum) {
    for (int b = 0; b < kBand; ++b) {
      F s, d;
      load(s, y + at + b * kFloatLanes);
      load(d, dy + at + b * kFloatLanes);
      const F v = d * (F)((U)one & (U)(s > 0.0f));
      store(dz + at + b * kFloatLanes, v);
      sum[b] += v;
    }
  });
  column_sums_from(rows, cols, j0, acc,
                   [&](int64_t k) { return dz[k] = dy[k] * detail::positive_mask(y[k]); });
}

// bfloat16 dy and y, float32 dz (the bfloat16 matmuls of this layer compute in float32): relu's
// gradient widened in the same pass.
LOCKSTEP_DISPATCHED_LANES(void, relu_bias_grad_widen,
                          (const uint16_t* __restrict dy, const uint16_t* __restrict y,
                           float* __restrict dz, float* __restrict acc, int64_t rows, int64_t cols),
                          (dy, y, dz, acc, rows, cols)) {
  using F = typename Lanes<kFloatLanes>::F;
  using U = typename Lanes<kFloatLanes>::U;
  using H = typename Lanes<kFloatLanes>::H;
  const F one = F{} + 1.0f;
  const int64_t j0 = band_sums<kFloatLanes>(rows, cols, acc, [&](int64_t at, F* sum) {
    for (int b = 0; b < kBand; ++b) {
      H sh, dh;
      load(sh, y + at + b * kFloatLanes);
      load(dh, dy + at + b * kFloatLanes);
      const F s = (F)(__builtin_convertvector(sh, U) << 16);
      const F v = (F)(__builtin_convertvector(dh, U) << 16) * (F)((U)one & (U)(s > 0.0f));
      store(dz + at + b * kFloatLanes, v);
      sum[b] += v;
    }
  });
  column_sums_from(rows, cols, j0, acc, [&](int64_t k) {
    return dz[k] = float_of_bits(static_cast<uint32_t>(dy[k]) << 16) *
                   detail::positive_mask(float_of_bits(static_cast<uint32_t>(y[k]) << 16));
  });
}

// bfloat16 dy, y and dz, on the bits as the separate bfloat16 kernel does: y > 0 keeps dy (a NaN
// comes out quiet); otherwise a zero of dy's sign, NaN for NaN dy, the default NaN for infinite
// dy (inf · 0). The sum widens each dz, as column_sums does.
[[gnu::always_inline]] inline uint16_t relu_grad_bf16(uint16_t dv, uint16_t sv) {
  const uint16_t smag = sv & 0x7fffu, dmag = dv & 0x7fffu;
  const bool positive = (sv & 0x8000u) == 0 && smag != 0 && smag <= 0x7f80u;
  uint16_t r = positive ? dv : static_cast<uint16_t>(dv & 0x8000u);
  r = dmag > 0x7f80u ? static_cast<uint16_t>(dv | 0x0040u) : r;
  return (!positive && dmag == 0x7f80u) ? detail::kDefaultNanBfloat16 : r;
}
LOCKSTEP_DISPATCHED_LANES(void, relu_bias_grad_bf16,
                          (const uint16_t* __restrict dy, const uint16_t* __restrict y,
                           uint16_t* __restrict dz, float* __restrict acc, int64_t rows,
                           int64_t cols),
                          (dy, y, dz, acc, rows, cols)) {
  using F = typename Lanes<kFloatLanes>::F;
  using U = typename Lanes<kFloatLanes>::U;
  using H = typename Lanes<kFloatLanes>::H;
  constexpr int64_t kWidth = int64_t{kBand} * kFloatLanes;
  const int64_t j0 = band_sums<kFloatLanes>(rows, cols, acc, [&](int64_t at, F* sum) {
    // The bits in 16-bit lanes (a loop GCC vectorises), then the row's band widened and added.
    // (Pointers restated __restrict: a lambda's captures lose it, and with it the vector loop.)
    const uint16_t* __restrict d = dy + at;
    const uint16_t* __restrict s = y + at;
    uint16_t* __restrict out = dz + at;
    for (int64_t j = 0; j < kWidth; ++j) out[j] = relu_grad_bf16(d[j], s[j]);
    for (int b = 0; b < kBand; ++b) {
      H r;
      load(r, dz + at + b * kFloatLanes);
      sum[b] += (F)(__builtin_convertvector(r, U) << 16);
    }
  });
  column_sums_from(rows, cols, j0, acc, [&](int64_t k) {
    dz[k] = relu_grad_bf16(dy[k], y[k]);
    return float_of_bits(static_cast<uint32_t>(dz[k]) << 16);
  });
}

}  // namespace

bool relu_bias_grad_into(const Tensor& dy, const Tensor& y, const Tensor& dz, const Tensor& dbias) {
  if (dy.rank() != 2 || !(dy.shape() == y.shape()) || !(dz.shape() == dy.shape()) ||
      dy.dtype() != y.dtype() || dbias.num_elements() != dy.dim(1) ||
      (dbias.dtype() != DType::float32 && dbias.dtype() != DType::bfloat16)) {
    return false;
  }
  const int64_t rows = dy.dim(0), cols = dy.dim(1);
  const bool direct = dbias.dtype() == DType::float32;
  std::vector<float> scratch(direct ? 0 : static_cast<size_t>(cols));
  float* acc = direct ? dbias.data<float>() : scratch.data();
  const auto* d16 = reinterpret_cast<const uint16_t*>(dy.raw_data());
  const auto* y16 = reinterpret_cast<const uint16_t*>(y.raw_data());
  if (dy.dtype() == DType::float32 && dz.dtype() == DType::float32) {
    relu_bias_grad_f32(dy.data<float>(), y.data<float>(), dz.data<float>(), acc, rows, cols);
  } else if (dy.dtype() == DType::bfloat16 && dz.dtype() == DType::float32) {
    relu_bias_grad_widen(d16, y16, dz.data<float>(), acc, rows, cols);
  } else if (dy.dtype() == DType::bfloat16 && dz.dtype() == DType::bfloat16) {
    relu_bias_grad_bf16(d16, y16, reinterpret_cast<uint16_t*>(dz.raw_data()), acc, rows, cols);
  } else {
    return false;
  }
  if (!direct) {
    bfloat16* out = dbias.data<bfloat16>();
    for (int64_t j = 0; j < cols; ++j) out[j] = bfloat16(acc[j]);
  }
  return true;
}

}  // namespace lockstep::ops::detail
