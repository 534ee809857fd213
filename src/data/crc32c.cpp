#include "lockstep/data/crc32c.h"

#include <array>

namespace lockstep {
namespace {

// No Debian package of bookworm ships a CRC-32C library (zlib's crc32 is the other polynomial), so
// this is the table-driven byte-at-a-time form; records are read once, and 1 GB/s is plenty.
constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

}  // namespace

uint32_t crc32c_extend(uint32_t crc, std::span<const uint8_t> bytes) {
  uint32_t c = ~crc;
  for (uint8_t b : bytes) c = kTable[(c ^ b) & 0xFF] ^ (c >> 8);
  return ~c;
}

}  // namespace lockstep
