#pragma once
// The layout of the per-lane loops over a short axis (ops/column_softmax.h, the classifier's loss
// in ops/losses.cpp, the categorical accuracy metrics): a block of rows of a row-major matrix
// transposed into columns, so that lane i of a vector holds row i, and back. Inlined into each ISA
// build of those loops (core/cpu_dispatch.h), W being the build's float32 lanes. Whole blocks of W
// rows go through registers (lane_transpose.h), the rest one value at a time; either way the
// values move unchanged.
#include <cstdint>
#include <cstring>

#include "core/lane_transpose.h"

namespace lockstep::detail {

// Rows [0, count) of `rows` (n values each) into n columns of `ld` floats (count <= ld), column c
// at columns + c * ld; the lanes from count to ld hold `pad`, a value the loop computes on and its
// caller drops. `readable`: how many floats from `rows` on may be read (a block's vectors run past
// its last row's end into what follows).
template <int W>
[[gnu::always_inline]] inline void rows_to_columns(const float* __restrict rows, int64_t count,
                                                   int64_t n, int64_t ld, float pad,
                                                   float* __restrict columns, int64_t readable) {
  using F = typename Lanes<W>::F;
  const int64_t chunks = (n + W - 1) / W;
  int64_t i0 = 0;
  for (; i0 + W <= count && (i0 + W - 1) * n + chunks * W <= readable; i0 += W) {
    for (int64_t j0 = 0; j0 < n; j0 += W) {
      F r[W];
      for (int i = 0; i < W; ++i) std::memcpy(&r[i], rows + (i0 + i) * n + j0, sizeof r[i]);
      lane_transpose::transpose<W>(r);
      for (int64_t q = 0; q < W && j0 + q < n; ++q)
        std::memcpy(columns + (j0 + q) * ld + i0, &r[q], sizeof r[q]);
    }
  }
  for (int64_t c = 0; c < n; ++c) {
    float* col = columns + c * ld;
    for (int64_t i = i0; i < count; ++i) col[i] = rows[i * n + c];
    for (int64_t i = count; i < ld; ++i) col[i] = pad;
  }
}

// The inverse: n columns of `ld` floats back into rows [0, count) of `rows` (n values each).
// `writable`: how many floats from `rows` on may be written (a row's last vector runs past its end
// into the next row, which is written after it).
template <int W>
[[gnu::always_inline]] inline void columns_to_rows(const float* __restrict columns, int64_t ld,
                                                   int64_t count, int64_t n, float* __restrict rows,
                                                   int64_t writable) {
  using F = typename Lanes<W>::F;
  constexpr int64_t kMaxChunks = 8;  // n up to 8 W
  const int64_t chunks = (n + W - 1) / W;
  int64_t i0 = 0;
  if (chunks <= kMaxChunks) {
    for (; i0 + W <= count && (i0 + W - 1) * n + chunks * W <= writable; i0 += W) {
      F r[kMaxChunks][W];
      for (int64_t k = 0; k < chunks; ++k) {
        for (int64_t q = 0; q < W; ++q) {
          if (k * W + q < n) {
            std::memcpy(&r[k][q], columns + (k * W + q) * ld + i0, sizeof r[k][q]);
          } else {
            r[k][q] = F{};
          }
        }
        lane_transpose::transpose<W>(r[k]);
      }
      // Row by row, each row's vectors in order: the lanes past a row's end land on the next
      // row's first values, which its own stores then write.
      for (int64_t i = 0; i < W; ++i)
        for (int64_t k = 0; k < chunks; ++k)
          std::memcpy(rows + (i0 + i) * n + k * W, &r[k][i], sizeof r[k][i]);
    }
  }
  for (int64_t i = i0; i < count; ++i)
    for (int64_t c = 0; c < n; ++c) rows[i * n + c] = columns[c * ld + i];
}

}  // namespace lockstep::detail
