#include "chunk_layout.h"

#include <algorithm>

namespace lockstep::distribute {

ChunkLayout::ChunkLayout(const std::vector<Variable>& vars, int threads) {
  for (const Variable& v : vars) {
    begins_.push_back(total_);
    sizes_.push_back(v.num_elements());
    total_ += v.num_elements();
  }
  chunk_ =
      std::clamp((total_ / (4 * std::max(threads, 1)) + 255) / 256 * 256, kMinChunk, kMaxChunk);
  for (size_t i = 0; i < sizes_.size(); ++i) {
    for (int64_t off = 0; off < sizes_[i]; off += chunk_)
      chunks_.push_back({i, off, begins_[i] + off, std::min(chunk_, sizes_[i] - off)});
  }
}

}  // namespace lockstep::distribute
