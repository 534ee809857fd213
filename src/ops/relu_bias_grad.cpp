// relu's gradient and the bias gradient of a Dense layer in one pass over dz (linear_backward's
// hot path): dz = dy ⊙ [y > 0] and dbias[j] = Σ_i dz[i, j], each row added in order, exactly as
// activation_grad_into followed by column_sums_into compute them (same bits), without reading dz a
// second time.
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/cpu_dispatch.h"

#include "internal.h"
#include "kernel_util.h"

namespace lockstep::ops::detail {
namespace {

float float_of_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// float32: dz = dy · (y > 0 ? 1 : 0) (NaN dy stays NaN, as the separate kernel).
LOCKSTEP_DISPATCHED(void, relu_bias_grad_f32,
                    (const float* __restrict dy, const float* __restrict y, float* __restrict dz,
                     float* __restrict acc, int64_t rows, int64_t cols),
                    (dy, y, dz, acc, rows, cols)) {
  for (int64_t j = 0; j < cols; ++j) acc[j] = 0.0f;
  for (int64_t i = 0; i < rows; ++i) {
    const float* d = dy + i * cols;
    const float* s = y + i * cols;
    float* out = dz + i * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const float v = d[j] * detail::positive_mask(s[j]);
      out[j] = v;
      acc[j] += v;
    }
  }
}

// bfloat16 dy and y, float32 dz (the bfloat16 matmuls of this layer compute in float32): relu's
// gradient widened in the same pass.
LOCKSTEP_DISPATCHED(void, relu_bias_grad_widen,
                    (const uint16_t* __restrict dy, const uint16_t* __restrict y,
                     float* __restrict dz, float* __restrict acc, int64_t rows, int64_t cols),
                    (dy, y, dz, acc, rows, cols)) {
  for (int64_t j = 0; j < cols; ++j) acc[j] = 0.0f;
  for (int64_t i = 0; i < rows; ++i) {
    const uint16_t* d = dy + i * cols;
    const uint16_t* s = y + i * cols;
    float* out = dz + i * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const float v = float_of_bits(static_cast<uint32_t>(d[j]) << 16) *
                      detail::positive_mask(float_of_bits(static_cast<uint32_t>(s[j]) << 16));
      out[j] = v;
      acc[j] += v;
    }
  }
}

// bfloat16 dy, y and dz, on the bits as the separate bfloat16 kernel does: y > 0 keeps dy (a NaN
// comes out quiet); otherwise a zero of dy's sign, NaN for NaN dy, the default NaN for infinite
// dy (inf · 0). The sum widens each dz, as column_sums does.
LOCKSTEP_DISPATCHED(void, relu_bias_grad_bf16,
                    (const uint16_t* __restrict dy, const uint16_t* __restrict y,
                     uint16_t* __restrict dz, float* __restrict acc, int64_t rows, int64_t cols),
                    (dy, y, dz, acc, rows, cols)) {
  for (int64_t j = 0; j < cols; ++j) acc[j] = 0.0f;
  for (int64_t i = 0; i < rows; ++i) {
    const uint16_t* d = dy + i * cols;
    const uint16_t* s = y + i * cols;
    uint16_t* out = dz + i * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const uint16_t dv = d[j], sv = s[j];
      const uint16_t smag = sv & 0x7fffu, dmag = dv & 0x7fffu;
      const bool positive = (sv & 0x8000u) == 0 && smag != 0 && smag <= 0x7f80u;
      uint16_t r = positive ? dv : static_cast<uint16_t>(dv & 0x8000u);
      r = dmag > 0x7f80u ? static_cast<uint16_t>(dv | 0x0040u) : r;
      r = (!positive && dmag == 0x7f80u) ? detail::kDefaultNanBfloat16 : r;
      out[j] = r;
      acc[j] += float_of_bits(static_cast<uint32_t>(r) << 16);
    }
  }
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
