#include "lockstep/data/crc32c.h"

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

namespace lockstep {
namespace {

std::span<const uint8_t> bytes_of(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// RFC 3720 (iSCSI), appendix B.4, and the "check" value of the CRC catalogue.
TEST(Crc32c, MatchesTheStandardTestVectors) {
  EXPECT_EQ(crc32c(bytes_of("123456789")), 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<uint8_t>(i);
    down[i] = static_cast<uint8_t>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down), 0x113FDB5Cu);
  EXPECT_EQ(crc32c({}), 0u);
}

TEST(Crc32c, ExtendsAcrossPieces) {
  EXPECT_EQ(crc32c_extend(crc32c(bytes_of("1234")), bytes_of("56789")), 0xE3069283u);
}

// TFRecord's mask, worked out by hand from its definition: rotate right by 15, add 0xA282EAD8.
TEST(Crc32c, MaskIsTensorFlowsAndUnmaskInvertsIt) {
  EXPECT_EQ(crc32c_mask(0xE3069283u), 0xC78AB0E5u);
  EXPECT_EQ(crc32c_unmask(0xC78AB0E5u), 0xE3069283u);
  EXPECT_EQ(crc32c_unmask(crc32c_mask(0x12345678u)), 0x12345678u);
}

}  // namespace
}  // namespace lockstep
