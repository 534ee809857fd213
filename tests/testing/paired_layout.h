#pragma once
// A PairedRowsLayout as oneDNN lays out a BA<b>a<c>b2a operand, for tests: the rows padded to a
// multiple of row_block and the columns to a multiple of col_block, row_block × col_block tiles,
// the tiles along the rows innermost — so every stride and the size follow from the four extents.
#include <cstdint>

#include "lockstep/core/paired_rows_layout.h"

namespace lockstep::testing {

inline PairedRowsLayout tiled_paired_layout(int64_t rows, int64_t cols, int64_t row_block,
                                            int64_t col_block) {
  const int64_t padded_rows = (rows + row_block - 1) / row_block * row_block;
  const int64_t padded_cols = (cols + col_block - 1) / col_block * col_block;
  return {.rows = rows,
          .cols = cols,
          .row_block = row_block,
          .col_block = col_block,
          .row_tile_stride = row_block * col_block,
          .col_tile_stride = padded_rows * col_block,
          .size = padded_rows * padded_cols};
}

}  // namespace lockstep::testing
