#pragma once
// What the MPI sources of the collectives share (internal): MPI's error codes as Lockstep's
// exceptions, MPI's names for Lockstep's dtypes and reduce ops, MPI's int counts, and this host's
// name as the workers exchange it.
#include <mpi.h>

#include <cstddef>
#include <string>

#include "lockstep/core/dtype.h"
#include "lockstep/distribute/collective.h"

namespace lockstep::distribute::detail {

// MPI's text for an error code.
std::string mpi_error_text(int code);
// Throws Unavailable("<what> failed: <MPI's text>") unless rc is MPI_SUCCESS.
void check_mpi(int rc, const char* what);
// The MPI datatype of `dtype`; bfloat16 has none (callers widen it to float32).
MPI_Datatype mpi_type(DType dtype);
MPI_Op mpi_op(ReduceOp op);
// `n` as MPI's int count; InvalidArgument naming `what` when it does not fit.
int to_int_count(size_t n, const char* what);

// Host names travel in fixed-size records of this many bytes (NUL-terminated, truncated).
inline constexpr size_t kHostBytes = 64;
std::string local_host_name();

}  // namespace lockstep::distribute::detail
