#include "lockstep/distribute/failure.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

namespace lockstep::distribute {

void abort_job(const std::exception& error, int exit_code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "lockstep: fatal (world rank %d): %s\n", rank, error.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
  } else {
    std::fprintf(stderr, "lockstep: fatal: %s\n", error.what());
    std::fflush(stderr);
  }
  // MPI_Abort does not return in Open MPI; _Exit covers the non-MPI case and any MPI that does.
  std::_Exit(exit_code);
}

}  // namespace lockstep::distribute
