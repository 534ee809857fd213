// The block pool's per-thread caches: a thread gets back the blocks it freed itself (still in its
// core's cache), other threads do not take them while it runs, and they return to the shared pool
// when it exits — also when it frees tensors while its thread_local objects are destroyed.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep {
namespace {

const void* block_of(const Tensor& t) {
  return t.raw_data();
}

// Sizes no other test allocates, so the pool holds no block of them unless these tests put it
// there.
constexpr int64_t kOwnSize = 12347, kExitSize = 12351, kLateSize = 12353, kManySize = 12361;

TEST(StorageThreadCache, AThreadReusesItsOwnFreedBlockAndOthersDoNot) {
  const void* first = nullptr;
  const void* again = nullptr;
  const void* other = nullptr;
  std::thread owner([&] {
    { first = block_of(Tensor({kOwnSize})); }
    // The owner is alive and its freed block sits in its cache: another thread gets a new one.
    std::thread([&] { other = block_of(Tensor({kOwnSize})); }).join();
    const auto before = storage_pool_stats();
    again = block_of(Tensor({kOwnSize}));
    EXPECT_EQ(storage_pool_stats().pool_hits, before.pool_hits + 1);
  });
  owner.join();
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
}

TEST(StorageThreadCache, AnExitingThreadHandsItsBlocksToTheSharedPool) {
  const void* freed = nullptr;
  std::thread([&] { freed = block_of(Tensor({kExitSize})); }).join();
  const auto before = storage_pool_stats();
  const void* reused = nullptr;
  std::thread([&] { reused = block_of(Tensor({kExitSize})); }).join();
  const auto after = storage_pool_stats();
  EXPECT_EQ(reused, freed);
  EXPECT_EQ(after.system_allocations, before.system_allocations);
  EXPECT_EQ(after.pool_hits, before.pool_hits + 1);
}

// A thread_local tensor whose block was allocated after the thread's cache was created is
// destroyed after the cache: its release must go to the shared pool, not to the destroyed cache.
TEST(StorageThreadCache, ATensorFreedAfterTheThreadCacheIsDestroyedGoesToTheSharedPool) {
  const void* late = nullptr;
  std::thread([&] {
    thread_local Tensor held;  // constructed empty, before the cache exists
    held = Tensor({kLateSize});
    late = block_of(held);
  }).join();
  const auto before = storage_pool_stats();
  const void* reused = nullptr;
  std::thread([&] { reused = block_of(Tensor({kLateSize})); }).join();
  EXPECT_EQ(reused, late);
  EXPECT_EQ(storage_pool_stats().system_allocations, before.system_allocations);
}

// One thread frees many blocks of one size that another allocated (a prefetch thread's batches,
// freed by the training loop): it keeps a few, the rest go where other threads find them.
TEST(StorageThreadCache, AThreadKeepsAFewBlocksOfOneSizeAndSharesTheRest) {
  constexpr int kBlocks = 40, kKept = 16;
  std::vector<Tensor> made;
  for (int i = 0; i < kBlocks; ++i) made.push_back(Tensor({kManySize}));
  std::thread consumer([&] {
    made.clear();
    const auto before = storage_pool_stats();
    std::thread([] {
      std::vector<Tensor> again;
      for (int i = 0; i < kBlocks - kKept; ++i) again.push_back(Tensor({kManySize}));
    }).join();
    EXPECT_EQ(storage_pool_stats().system_allocations, before.system_allocations);
  });
  consumer.join();
}

TEST(StorageThreadCache, LiveBytesCountBlocksFreedOnAnotherThread) {
  const size_t base = storage_pool_stats().live_bytes;
  Tensor t({1000});
  EXPECT_EQ(storage_pool_stats().live_bytes, base + 4000);
  std::thread([moved = std::move(t)]() mutable { moved = Tensor(); }).join();
  EXPECT_EQ(storage_pool_stats().live_bytes, base);
}

}  // namespace
}  // namespace lockstep
