#include "lockstep/core/bfloat16.h"
#include "cpu_dispatch.h"

namespace lockstep {
namespace {

// bfloat16::round_from_float without the branch, so the loops below vectorise: round to nearest,
// ties to even; NaN -> quiet NaN of the same sign and top payload bits. Bit-identical to it.
inline uint32_t round_bits(uint32_t u) {
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return (u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
}

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

// Exact integer bit operations: every build (cpu_dispatch.h) gives the same bits.
LOCKSTEP_DISPATCHED(void, float_to_bfloat16, (const float* src, bfloat16* dst, size_t n),
                    (src, dst, n)) {
  uint16_t* out = reinterpret_cast<uint16_t*>(dst);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint16_t>(round_bits(bits_of(src[i])));
}

LOCKSTEP_DISPATCHED(void, bfloat16_to_float, (const bfloat16* src, float* dst, size_t n),
                    (src, dst, n)) {
  const uint16_t* in = reinterpret_cast<const uint16_t*>(src);
  for (size_t i = 0; i < n; ++i) dst[i] = float_of(static_cast<uint32_t>(in[i]) << 16);
}

LOCKSTEP_DISPATCHED(void, add_bfloat16_to_float, (const bfloat16* src, float* dst, size_t n),
                    (src, dst, n)) {
  const uint16_t* in = reinterpret_cast<const uint16_t*>(src);
  for (size_t i = 0; i < n; ++i) dst[i] += float_of(static_cast<uint32_t>(in[i]) << 16);
}

LOCKSTEP_DISPATCHED(void, round_to_bfloat16_values, (const float* src, float* dst, size_t n),
                    (src, dst, n)) {
  for (size_t i = 0; i < n; ++i) dst[i] = round_to_bfloat16_value(src[i]);
}

}  // namespace lockstep
