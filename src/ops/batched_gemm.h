#pragma once
// Internal to the ops layer: a batch of matrix products over strided operands, one oneDNN call for
// the whole batch. batch_matmul and the attention kernels use it to multiply the heads of a
// [B, T, H, D] tensor in place (through strides), without transposing it to [B, H, T, D] first.
#include <cstdint>

#include "lockstep/core/dtype.h"

namespace lockstep::ops::detail {

// A [b0, b1, rows, cols] batch of matrices: element (i, j, r, c) at
// data + i * s0 + j * s1 + r * rs + c * cs (strides in elements). A transposed operand is the
// same memory with rows/cols and rs/cs swapped.
struct StridedBatch {
  const void* data = nullptr;
  DType dtype = DType::float32;
  int64_t b0 = 1, b1 = 1, rows = 0, cols = 0;
  int64_t s0 = 0, s1 = 0, rs = 0, cs = 1;

  // The same matrices transposed (a view).
  StridedBatch t() const {
    StridedBatch v = *this;
    v.rows = cols;
    v.cols = rows;
    v.rs = cs;
    v.cs = rs;
    return v;
  }
};

// y = alpha · a · b for each of the b0 × b1 matrices: a [.., M, K], b [.., K, N], y [.., M, N]
// (y's data is written). float32 and bfloat16 operands (the same dtype) run oneDNN's matmul
// (bfloat16 accumulates in float32; y float32 or the operands' dtype); float64 runs a loop.
// Shapes are checked by the caller.
void batched_gemm(const StridedBatch& a, const StridedBatch& b, const StridedBatch& y,
                  double alpha = 1.0);

}  // namespace lockstep::ops::detail
