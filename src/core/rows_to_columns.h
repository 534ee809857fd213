#pragma once
// The layout of the per-lane loops over a short axis (ops/column_softmax.h, the classifier's loss
// in ops/losses.cpp, the categorical accuracy metrics): a block of rows of a row-major matrix
// transposed into columns, so that lane i of a vector holds row i. Inlined into each ISA build of
// those loops (core/cpu_dispatch.h).
#include <cstdint>

namespace lockstep::detail {

// Rows [0, count) of `rows` (n values each) into n columns of `ld` floats (count <= ld), column c
// at columns + c * ld; the lanes from count to ld hold `pad`, a value the loop computes on and its
// caller drops.
[[gnu::always_inline]] inline void rows_to_columns(const float* __restrict rows, int64_t count,
                                                   int64_t n, int64_t ld, float pad,
                                                   float* __restrict columns) {
  for (int64_t c = 0; c < n; ++c) {
    float* col = columns + c * ld;
    for (int64_t i = 0; i < count; ++i) col[i] = rows[i * n + c];
    for (int64_t i = count; i < ld; ++i) col[i] = pad;
  }
}

}  // namespace lockstep::detail
