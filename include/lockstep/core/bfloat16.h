#pragma once
// bfloat16: the top 16 bits of an IEEE float32 (8-bit exponent, 7-bit mantissa). Same range as
// float32, ~3 significant decimal digits. Conversion from float32 rounds to nearest, ties to even;
// NaN stays NaN (quiet) instead of rounding into infinity.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lockstep {

struct bfloat16 {
  uint16_t bits = 0;

  bfloat16() = default;
  explicit bfloat16(float f) : bits(round_from_float(f)) {}
  static bfloat16 from_bits(uint16_t b) {
    bfloat16 r;
    r.bits = b;
    return r;
  }
  explicit operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }

  static uint16_t round_from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    return static_cast<uint16_t>(u >> 16);
  }
};

inline bool operator==(bfloat16 a, bfloat16 b) {
  return a.bits == b.bits;
}

// float(bfloat16(f)): f rounded to the nearest bfloat16 value (ties to even; NaN -> quiet NaN),
// kept in float32. Branch-free, so loops calling it vectorise; the element of
// round_to_bfloat16_values.
inline float round_to_bfloat16_value(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  const uint32_t quiet_nan = (u | 0x00400000u) & 0xffff0000u;
  u = (u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Bulk conversions, vectorisable.
void float_to_bfloat16(const float* src, bfloat16* dst, size_t n);
void bfloat16_to_float(const bfloat16* src, float* dst, size_t n);
// dst[i] += float(src[i]): a bfloat16 term added to a float32 sum (one float32 addition each).
void add_bfloat16_to_float(const bfloat16* src, float* dst, size_t n);
// dst[i] = float(bfloat16(src[i])) in one pass: float32 values exactly representable in bfloat16,
// bit for bit what float_to_bfloat16 followed by bfloat16_to_float gives. src == dst is allowed.
void round_to_bfloat16_values(const float* src, float* dst, size_t n);

}  // namespace lockstep
