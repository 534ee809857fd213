#include "lockstep/distribute/elementwise_update.h"

#include "core/cpu_dispatch.h"

namespace lockstep::distribute {
namespace {
LOCKSTEP_TARGET_CLONES void sum_of_two(float* __restrict out, const float* __restrict a,
                                       const float* __restrict b, size_t n) {
  for (size_t j = 0; j < n; ++j) out[j] = a[j] + b[j];
}
}  // namespace

void ElementwiseUpdate::apply_sum_of_two(size_t i, int64_t offset, const float* w, const float* a,
                                         const float* b, float* g,
                                         std::span<const float* const> slots, float* w_out,
                                         std::span<float* const> slots_out, size_t n,
                                         float* rounded) const {
  sum_of_two(g, a, b, n);
  apply(i, offset, w, g, slots, w_out, slots_out, n, rounded);
}

}  // namespace lockstep::distribute
