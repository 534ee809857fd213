#pragma once
// GCC vector extensions of W float32 lanes: one register of the build (LOCKSTEP_DISPATCHED_LANES,
// core/cpu_dispatch.h: 4 in the baseline build, 8 in x86-64-v3, 16 in x86-64-v4), and the integer
// lanes of the same width for masks, shuffles and bit work. Passed by reference: by value they
// would change the baseline ABI.
#include <cstdint>

namespace lockstep::detail {

template <int W>
struct Lanes {
  typedef float F __attribute__((vector_size(4 * W)));
  typedef int32_t I __attribute__((vector_size(4 * W)));
  typedef uint32_t U __attribute__((vector_size(4 * W)));
  typedef uint16_t H __attribute__((vector_size(2 * W)));
};

}  // namespace lockstep::detail
