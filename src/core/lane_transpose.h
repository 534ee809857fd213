#pragma once
// A W × W block of float32 lanes transposed in registers: W vectors in, the same W vectors out
// with r[j][i] = old r[i][j]. For the hand-written loops over GCC vector types (the bodies of
// LOCKSTEP_DISPATCHED_LANES loops, core/cpu_dispatch.h) that need an operand's columns as vectors:
// log2(W) rounds of two-input shuffles (W of them per round) instead of W · W scalar loads and
// stores. It moves values and computes none, so it changes no bit.
#include <cstdint>

#include "core/vector_lanes.h"

namespace lockstep::detail::lane_transpose {

// Round S (S = 1, 2, 4, ... W / 2) swaps the off-diagonal S × S blocks of each pair of rows
// (i, i + S) with i & S == 0: after the last round every S × S block, and so every element, sits
// at its transposed place.
template <int W, int S>
[[gnu::always_inline]] inline void transpose_round(typename Lanes<W>::F (&r)[W]) {
  if constexpr (S < W) {
    using I = typename Lanes<W>::I;
    I low{}, high{};
    for (int l = 0; l < W; ++l) {
      low[l] = (l & S) == 0 ? l : W + l - S;
      high[l] = (l & S) == 0 ? l + S : W + l;
    }
    for (int i = 0; i < W; ++i) {
      if (i & S) continue;
      const auto a = r[i], b = r[i + S];
      r[i] = __builtin_shuffle(a, b, low);
      r[i + S] = __builtin_shuffle(a, b, high);
    }
    transpose_round<W, 2 * S>(r);
  }
}

template <int W>
[[gnu::always_inline]] inline void transpose(typename Lanes<W>::F (&r)[W]) {
  transpose_round<W, 1>(r);
}

}  // namespace lockstep::detail::lane_transpose
