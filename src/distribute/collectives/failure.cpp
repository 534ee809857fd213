#include "lockstep/distribute/failure.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "lockstep/core/error.h"
#include "mpi_diagnosis.h"

namespace lockstep::distribute {
namespace {

// A collective of this process that timed out, or a peer known to be gone.
bool is_communication_failure(const std::exception& error) {
  return dynamic_cast<const DeadlineExceeded*>(&error) != nullptr ||
         dynamic_cast<const Unavailable*>(&error) != nullptr;
}

}  // namespace

std::string failure_message(const std::exception& error) {
  const std::string root = detail::job_failure_report();
  if (root.empty() || root == error.what()) return error.what();
  return root + " (on this worker it surfaced as: " + error.what() + ")";
}

void abort_job(const std::exception& error, int exit_code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    // A replica that timed out waiting for the one inside a cross-worker collective is a symptom;
    // that collective is about to name the worker that stopped answering. Let it finish.
    if (is_communication_failure(error)) detail::await_waiting_collectives();
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "lockstep: fatal (world rank %d): %s\n", rank,
                 failure_message(error).c_str());
    std::fflush(stderr);
    // MPI_Abort kills every process of the job: first let the other survivors say what they saw.
    detail::wait_for_survivors_to_report();
    MPI_Abort(MPI_COMM_WORLD, exit_code);
  } else {
    std::fprintf(stderr, "lockstep: fatal: %s\n", error.what());
    std::fflush(stderr);
  }
  // MPI_Abort does not return in Open MPI; _Exit covers the non-MPI case and any MPI that does.
  std::_Exit(exit_code);
}

}  // namespace lockstep::distribute
