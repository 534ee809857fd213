#include "mpi_support.h"

#include <unistd.h>

#include <climits>

#include "lockstep/core/check.h"
#include "lockstep/core/error.h"

namespace lockstep::distribute::detail {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw Unavailable(std::string(what) + " failed: " + mpi_error_text(rc));
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return MPI_FLOAT;
    case DType::float64:
      return MPI_DOUBLE;
    case DType::int32:
      return MPI_INT32_T;
    case DType::int64:
      return MPI_INT64_T;
    case DType::uint8:
      return MPI_UINT8_T;
    case DType::bfloat16:
      break;  // widened by the caller
  }
  throw Internal("mpi_type: no MPI type for " + std::string(dtype_name(dtype)));
}

MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::MAX ? MPI_MAX : MPI_SUM;
}

int to_int_count(size_t n, const char* what) {
  LOCKSTEP_CHECK(n <= static_cast<size_t>(INT_MAX), what, ": ", n,
                 " elements exceed MPI's int count; split the buffer");
  return static_cast<int>(n);
}

std::string local_host_name() {
  char host[kHostBytes] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace lockstep::distribute::detail
