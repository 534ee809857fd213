#include "lockstep/core/storage.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace lockstep {
namespace {

// Past this many cached bytes, freed blocks go back to the system instead of the pool.
constexpr size_t kMaxCachedBytes = size_t{2} << 30;

struct Pool {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;
  StoragePoolStats stats;
};

Pool& pool() {
  // Leaked on purpose: tensors in static objects may be released after main returns.
  static Pool* p = new Pool;
  return *p;
}

size_t block_bytes(size_t nbytes) {
  size_t payload = (nbytes + Storage::kAlignment - 1) / Storage::kAlignment * Storage::kAlignment;
  return payload + Storage::kAlignment;
}

}  // namespace

Storage* Storage::allocate(size_t nbytes) {
  size_t bytes = block_bytes(nbytes);
  void* block = nullptr;
  {
    Pool& p = pool();
    std::lock_guard lock(p.mu);
    auto it = p.free_blocks.find(bytes);
    if (it != p.free_blocks.end() && !it->second.empty()) {
      block = it->second.back();
      it->second.pop_back();
      p.stats.cached_bytes -= bytes;
      ++p.stats.pool_hits;
    } else {
      ++p.stats.system_allocations;
    }
    p.stats.live_bytes += nbytes;
    p.stats.peak_live_bytes = std::max(p.stats.peak_live_bytes, p.stats.live_bytes);
  }
  if (!block) {
    block = std::aligned_alloc(kAlignment, bytes);
    if (!block) throw std::bad_alloc();
  }
  return new (block) Storage(nbytes);
}

void Storage::release() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  const size_t requested = nbytes_;
  size_t bytes = block_bytes(nbytes_);
  this->~Storage();
  void* block = this;
  Pool& p = pool();
  {
    std::lock_guard lock(p.mu);
    p.stats.live_bytes -= requested;
    if (p.stats.cached_bytes + bytes <= kMaxCachedBytes) {
      p.free_blocks[bytes].push_back(block);
      p.stats.cached_bytes += bytes;
      return;
    }
  }
  std::free(block);
}

StoragePoolStats storage_pool_stats() {
  Pool& p = pool();
  std::lock_guard lock(p.mu);
  return p.stats;
}

void storage_pool_reset_peak() {
  Pool& p = pool();
  std::lock_guard lock(p.mu);
  p.stats.peak_live_bytes = p.stats.live_bytes;
}

}  // namespace lockstep
