#pragma once
// Reference-counted, 64-byte aligned memory behind tensors. Freed blocks go back to a pool keyed
// by size, so a training step that allocates the same shapes every step reaches a steady state
// with no calls to the system allocator (the idea of PyTorch's caching allocator, for host memory).
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace lockstep {

class Storage {
 public:
  static constexpr size_t kAlignment = 64;

  // A new block of at least `nbytes` (contents unspecified), with one reference.
  static Storage* allocate(size_t nbytes);

  void* data() { return reinterpret_cast<char*>(this) + kHeaderBytes; }
  size_t nbytes() const { return nbytes_; }

  void retain() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release();
  // True when exactly one handle refers to the block: whoever holds it may write into it without
  // anyone else seeing the change.
  bool unshared() const { return refs_.load(std::memory_order_acquire) == 1; }

  // Set by a writer that filled the whole block with float32 values that are bfloat16 values
  // (round_to_bfloat16_values), and cleared by any later writer of other values: lets
  // mixed_bfloat16's float32 form skip rounding what is already rounded (keras/layer.h). A new
  // block starts cleared.
  bool holds_bfloat16_values() const { return bfloat16_values_; }
  void set_holds_bfloat16_values(bool v) { bfloat16_values_ = v; }

  // Set by a writer that filled the block with a row-major [rows, cols] matrix of `elem_bytes`
  // elements at its start and the matrix's transpose after it (Tensor::transposed_copy), and
  // cleared by any later writer: lets a product that reads the matrix transposed read a dense
  // copy instead of a strided view. A new block starts cleared.
  struct TransposedCopy {
    int64_t rows = 0, cols = 0;
    size_t elem_bytes = 0;
    bool operator==(const TransposedCopy&) const = default;
  };
  const TransposedCopy& transposed_copy() const { return transposed_copy_; }
  void set_transposed_copy(TransposedCopy t) { transposed_copy_ = t; }

 private:
  static constexpr size_t kHeaderBytes = kAlignment;
  explicit Storage(size_t nbytes) : nbytes_(nbytes) {}
  std::atomic<int64_t> refs_{1};
  size_t nbytes_;
  bool bfloat16_values_ = false;
  TransposedCopy transposed_copy_;
};

// Statistics of the block pool, for tests that check the steady state does not allocate.
struct StoragePoolStats {
  uint64_t system_allocations = 0;  // blocks obtained from the system allocator, ever
  uint64_t pool_hits = 0;           // blocks reused from the pool, ever
  size_t cached_bytes = 0;          // bytes currently held in the pool
  // Bytes requested by the blocks in use (allocated and not yet released), process-wide, and the
  // most of it since the last storage_pool_reset_peak(): what tensors actually hold, e.g. the
  // activations a gradient tape keeps for the backward pass (measure the difference across the
  // forward pass).
  size_t live_bytes = 0;
  size_t peak_live_bytes = 0;
};
StoragePoolStats storage_pool_stats();
// Sets peak_live_bytes to the current live_bytes.
void storage_pool_reset_peak();
}  // namespace lockstep
