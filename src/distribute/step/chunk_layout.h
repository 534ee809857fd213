#pragma once
// ChunkLayout: the step's variables laid end to end as one flat range of float32 elements (the
// layout of every gradient buffer, the sum and the accumulator), cut into the update's chunks. A
// chunk never crosses a variable, so a chunk is a variable and a range of it.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "lockstep/autodiff/variable.h"

namespace lockstep::distribute {

struct Chunk {
  size_t var;
  int64_t offset;  // in the variable
  int64_t flat;    // in the flat range
  int64_t n;
};

class ChunkLayout {
 public:
  // Elements per chunk, between these bounds: about four chunks per thread (a chunk task costs
  // about a microsecond of scheduling, as much as the update of ~500 elements), never so large
  // that a straggling chunk is costly to re-run or its scratch leaves the core's L2.
  static constexpr int64_t kMinChunk = 2048;
  static constexpr int64_t kMaxChunk = 32768;

  ChunkLayout(const std::vector<Variable>& vars, int threads);

  size_t num_vars() const { return sizes_.size(); }
  int64_t size(size_t var) const { return sizes_[var]; }
  int64_t begin(size_t var) const { return begins_[var]; }  // flat offset of its first element
  int64_t total() const { return total_; }
  int64_t chunk_size() const { return chunk_; }
  const std::vector<Chunk>& chunks() const { return chunks_; }

 private:
  std::vector<int64_t> sizes_, begins_;
  int64_t total_ = 0;
  int64_t chunk_ = kMinChunk;
  std::vector<Chunk> chunks_;
};

}  // namespace lockstep::distribute
