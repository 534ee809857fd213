#include "lockstep/core/bfloat16.h"

namespace lockstep {

void float_to_bfloat16(const float* src, bfloat16* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i].bits = bfloat16::round_from_float(src[i]);
}

void bfloat16_to_float(const bfloat16* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t u = static_cast<uint32_t>(src[i].bits) << 16;
    std::memcpy(dst + i, &u, sizeof u);
  }
}

}  // namespace lockstep
