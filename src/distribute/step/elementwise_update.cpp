#include "lockstep/distribute/elementwise_update.h"

#include <cstring>

#include "lockstep/ops/elementwise.h"

namespace lockstep::distribute {

void RoundedOut::store(size_t from, const bfloat16* rounded, size_t count) const {
  if (layout != nullptr) {
    store_paired_rows<0>(*layout, reinterpret_cast<uint16_t*>(bf16),
                         static_cast<int64_t>(offset + from),
                         reinterpret_cast<const uint16_t*>(rounded), static_cast<int64_t>(count));
  } else if (bf16 != nullptr) {
    std::memcpy(bf16 + from, rounded, count * sizeof(bfloat16));
  }
}

void ElementwiseUpdate::apply_sum_of_two(size_t i, int64_t offset, const float* w, const float* a,
                                         const float* b, float* g,
                                         std::span<const float* const> slots, float* w_out,
                                         std::span<float* const> slots_out, size_t n,
                                         RoundedOut rounded, Streamed streamed) const {
  ops::sum_into(g, a, b, static_cast<int64_t>(n));
  apply(i, offset, w, g, slots, w_out, slots_out, n, rounded, streamed);
}

void ElementwiseUpdate::apply_sum_of_two(size_t i, int64_t offset, const float* w,
                                         const bfloat16* a, const bfloat16* b, float* g,
                                         std::span<const float* const> slots, float* w_out,
                                         std::span<float* const> slots_out, size_t n,
                                         RoundedOut rounded, Streamed streamed) const {
  bfloat16_to_float(a, g, n);
  add_bfloat16_to_float(b, g, n);
  apply(i, offset, w, g, slots, w_out, slots_out, n, rounded, streamed);
}

}  // namespace lockstep::distribute
