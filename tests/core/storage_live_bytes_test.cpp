// StoragePoolStats::live_bytes / peak_live_bytes: the bytes held by tensors in use.
#include <gtest/gtest.h>

#include "lockstep/core/tensor.h"

namespace lockstep {
namespace {

TEST(StorageLiveBytes, CountsRequestedBytesOfLiveBlocksAndTheirPeak) {
  const size_t base = storage_pool_stats().live_bytes;
  storage_pool_reset_peak();
  EXPECT_EQ(storage_pool_stats().peak_live_bytes, base);
  {
    Tensor a({100, 3}, DType::float32);  // 1200 B
    Tensor b({7}, DType::bfloat16);      // 14 B: requested bytes, not the 64-byte block
    EXPECT_EQ(storage_pool_stats().live_bytes, base + 1214);
    {
      Tensor c({1000}, DType::float64);
      Tensor view = c.reshape({10, 100});  // a view holds no new block
      Tensor handle = a;                   // nor does a copy of a handle
      EXPECT_EQ(storage_pool_stats().live_bytes, base + 1214 + 8000);
    }
    EXPECT_EQ(storage_pool_stats().live_bytes, base + 1214);
  }
  auto s = storage_pool_stats();
  EXPECT_EQ(s.live_bytes, base);
  EXPECT_EQ(s.peak_live_bytes, base + 9214);
  storage_pool_reset_peak();
  EXPECT_EQ(storage_pool_stats().peak_live_bytes, base);
}

}  // namespace
}  // namespace lockstep
