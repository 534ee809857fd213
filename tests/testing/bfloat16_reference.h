#pragma once
// An independent bfloat16 rounding for tests: round to nearest, ties to even, on the float32 bits
// (NaN stays a quiet NaN), written without the library's conversions so that tests of those
// conversions, of cached rounded weights and of optimizers have a reference to compare against.
#include <cmath>
#include <cstdint>
#include <cstring>

namespace lockstep::testing {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float float_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The float32 value of the bfloat16 nearest to f.
inline float reference_round_to_bfloat16(float f) {
  uint32_t u = float_bits(f);
  if (std::isnan(f)) return float_from_bits((u | 0x00400000u) & 0xffff0000u);
  const uint32_t low = u & 0xffffu, keep = u & 0xffff0000u;
  const bool up = low > 0x8000u || (low == 0x8000u && (keep & 0x10000u) != 0);
  return float_from_bits(keep + (up ? 0x10000u : 0u));
}

}  // namespace lockstep::testing
