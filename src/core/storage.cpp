#include "lockstep/core/storage.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace lockstep {
namespace {

// Past this many cached bytes (the shared pool and every thread's cache), freed blocks go back to
// the system instead of a cache.
constexpr size_t kMaxCachedBytes = size_t{2} << 30;
// Each thread keeps up to this many bytes of the blocks it freed, in blocks of at most
// kMaxThreadBlockBytes and at most kMaxThreadBlocksPerSize of one size, for its own next
// allocations (see ThreadCache). The count bound matters where one thread frees what another
// allocates (a prefetch thread's batches, consumed and freed by the training loop): the consumer
// keeps a few and the rest go back to the shared pool, where the producer finds them.
// Larger blocks gain nothing from it: a block of more than half a core's L2 is mostly out of that
// cache by the time it is reused, and keeping it per thread would only hold more memory.
constexpr size_t kMaxThreadCacheBytes = size_t{16} << 20;
constexpr size_t kMaxThreadBlockBytes = size_t{1} << 20;
constexpr size_t kMaxThreadBlocksPerSize = 16;

using FreeLists = std::unordered_map<size_t, std::vector<void*>>;

struct Stats {
  std::atomic<uint64_t> system_allocations{0}, pool_hits{0};
  std::atomic<size_t> cached_bytes{0}, live_bytes{0}, peak_live_bytes{0};
};

struct Pool {
  std::mutex mu;
  FreeLists free_blocks;  // guarded by mu
  Stats stats;
};

Pool& pool() {
  // Leaked on purpose: tensors in static objects may be released after main returns.
  static Pool* p = new Pool;
  return *p;
}

// A thread's own free blocks, taken before the shared pool's. A training step allocates the same
// sizes on every thread at once (each replica's activations and gradients); from one shared list a
// thread would often get a block another core wrote last, whose lines sit modified in that core's
// cache, and every write to it would first fetch them across. From its own list a thread gets
// back what it freed itself, still in its own cache, without the shared lock.
struct ThreadCache {
  FreeLists free_blocks;
  size_t bytes = 0;
  ~ThreadCache();
};

// The cache's life on this thread: a thread that frees tensors while its thread_local objects are
// destroyed must not touch the cache after its destructor ran. Trivially destructible, so it can
// still be read then.
enum class CacheState : unsigned char { unused, alive, destroyed };
thread_local CacheState t_cache_state = CacheState::unused;

ThreadCache* thread_cache() {
  if (t_cache_state == CacheState::destroyed) return nullptr;
  thread_local ThreadCache cache;
  t_cache_state = CacheState::alive;
  return &cache;
}

ThreadCache::~ThreadCache() {
  t_cache_state = CacheState::destroyed;
  Pool& p = pool();
  std::lock_guard lock(p.mu);
  for (auto& [bytes, blocks] : free_blocks) {
    auto& shared = p.free_blocks[bytes];
    shared.insert(shared.end(), blocks.begin(), blocks.end());
  }
}

void* take(FreeLists& lists, size_t bytes) {
  auto it = lists.find(bytes);
  if (it == lists.end() || it->second.empty()) return nullptr;
  void* block = it->second.back();
  it->second.pop_back();
  return block;
}

size_t block_bytes(size_t nbytes) {
  size_t payload = (nbytes + Storage::kAlignment - 1) / Storage::kAlignment * Storage::kAlignment;
  return payload + Storage::kAlignment;
}

void add_live(Stats& s, size_t nbytes) {
  const size_t live = s.live_bytes.fetch_add(nbytes, std::memory_order_relaxed) + nbytes;
  size_t peak = s.peak_live_bytes.load(std::memory_order_relaxed);
  while (live > peak &&
         !s.peak_live_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

// Reserves `bytes` of the cache budget; false when the caches are full.
bool reserve_cache(Stats& s, size_t bytes) {
  size_t cached = s.cached_bytes.load(std::memory_order_relaxed);
  do {
    if (cached + bytes > kMaxCachedBytes) return false;
  } while (
      !s.cached_bytes.compare_exchange_weak(cached, cached + bytes, std::memory_order_relaxed));
  return true;
}

// Blocks of this size or more start on a 2 MiB boundary and ask the kernel for transparent huge
// pages (where it grants them on request, Debian's "madvise" setting): a dataset read at random
// rows, or a convolution's activations, then costs a TLB miss per 2 MiB instead of per 4 KiB.
constexpr size_t kHugeBlockBytes = size_t{4} << 20;
constexpr size_t kHugePageBytes = size_t{2} << 20;

void* allocate_block(size_t bytes) {
  if (bytes < kHugeBlockBytes) return std::aligned_alloc(Storage::kAlignment, bytes);
  const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* block = std::aligned_alloc(kHugePageBytes, rounded);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (block != nullptr) madvise(block, rounded, MADV_HUGEPAGE);  // advice only: failure is fine
#endif
  return block;
}

}  // namespace

Storage* Storage::allocate(size_t nbytes) {
  const size_t bytes = block_bytes(nbytes);
  Pool& p = pool();
  void* block = nullptr;
  if (ThreadCache* cache = thread_cache()) {
    block = take(cache->free_blocks, bytes);
    if (block) cache->bytes -= bytes;
  }
  if (!block) {
    std::lock_guard lock(p.mu);
    block = take(p.free_blocks, bytes);
  }
  if (block) {
    p.stats.cached_bytes.fetch_sub(bytes, std::memory_order_relaxed);
    p.stats.pool_hits.fetch_add(1, std::memory_order_relaxed);
  } else {
    block = allocate_block(bytes);
    if (!block) throw std::bad_alloc();
    p.stats.system_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  add_live(p.stats, nbytes);
  return new (block) Storage(nbytes);
}

void Storage::release() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  const size_t requested = nbytes_;
  const size_t bytes = block_bytes(nbytes_);
  this->~Storage();
  void* block = this;
  Pool& p = pool();
  p.stats.live_bytes.fetch_sub(requested, std::memory_order_relaxed);
  if (!reserve_cache(p.stats, bytes)) {
    std::free(block);
    return;
  }
  ThreadCache* cache = bytes <= kMaxThreadBlockBytes ? thread_cache() : nullptr;
  if (cache && cache->bytes + bytes <= kMaxThreadCacheBytes) {
    std::vector<void*>& same_size = cache->free_blocks[bytes];
    if (same_size.size() < kMaxThreadBlocksPerSize) {
      same_size.push_back(block);
      cache->bytes += bytes;
      return;
    }
  }
  std::lock_guard lock(p.mu);
  p.free_blocks[bytes].push_back(block);
}

StoragePoolStats storage_pool_stats() {
  const Stats& s = pool().stats;
  StoragePoolStats out;
  out.system_allocations = s.system_allocations.load(std::memory_order_relaxed);
  out.pool_hits = s.pool_hits.load(std::memory_order_relaxed);
  out.cached_bytes = s.cached_bytes.load(std::memory_order_relaxed);
  out.live_bytes = s.live_bytes.load(std::memory_order_relaxed);
  out.peak_live_bytes = s.peak_live_bytes.load(std::memory_order_relaxed);
  return out;
}

void storage_pool_reset_peak() {
  Stats& s = pool().stats;
  s.peak_live_bytes.store(s.live_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace lockstep
