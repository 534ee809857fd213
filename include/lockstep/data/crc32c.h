#pragma once
// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78), as TFRecord files carry it.
//
// crc32c("123456789") = 0xE3069283; 32 zero bytes give 0x8A9136AA (RFC 3720, B.4). TFRecord stores
// the *masked* CRC, ((crc >> 15) | (crc << 17)) + 0xA282EAD8, because a CRC over data that itself
// contains CRCs is weak.
#include <cstdint>
#include <span>

namespace lockstep {

// Extends `crc` (the CRC of the bytes before) over `bytes`; crc32c(b) = crc32c_extend(0, b).
uint32_t crc32c_extend(uint32_t crc, std::span<const uint8_t> bytes);
inline uint32_t crc32c(std::span<const uint8_t> bytes) {
  return crc32c_extend(0, bytes);
}

inline uint32_t crc32c_mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}
inline uint32_t crc32c_unmask(uint32_t masked) {
  uint32_t rot = masked - 0xA282EAD8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace lockstep
