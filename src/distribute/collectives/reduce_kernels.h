#pragma once
// Element-wise reduction loops shared by the collective implementations (internal header).
#include <cstddef>

#include "lockstep/core/dtype.h"
#include "lockstep/distribute/collective.h"

namespace lockstep::distribute::detail {

// For i in [0, count): v = op(srcs[0][i], srcs[1][i], ..., srcs[n_src-1][i]) folded left to right
// in that order (the determinism contract), MEAN dividing by `mean_divisor` at the end; v is then
// stored to dsts[0][i] ... dsts[n_dst-1][i]. Every source element of a chunk is read before any
// destination element of that chunk is written, so a destination may alias a source at the same
// index (in-place all-reduce).
void reduce_fold(DType dtype, ReduceOp op, const void* const* srcs, int n_src, void* const* dsts,
                 int n_dst, size_t count, int mean_divisor);

// buf[i] = buf[i] / divisor (MEAN after an MPI SUM), with the same rules as reduce_fold.
void divide_in_place(void* buf, size_t count, DType dtype, int divisor);

}  // namespace lockstep::distribute::detail
