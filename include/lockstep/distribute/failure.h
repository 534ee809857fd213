#pragma once
// Ending a job after a failure. Library code never exits or aborts on its own: a lost worker makes
// collectives throw Unavailable / DeadlineExceeded, and the application's top-level handler
// decides. In a multi-process job the right decision is almost always abort_job(): returning
// normally would run MPI_Finalize, which waits for the lost peer forever.
//
//   int main(int argc, char** argv) {
//     try { return run(argc, argv); }
//     catch (const std::exception& e) { lockstep::distribute::abort_job(e); }
//   }
#include <exception>

namespace lockstep::distribute {

// Prints "lockstep: fatal: <e.what()>" (with the world rank when MPI is active) to stderr and ends
// the whole job with `exit_code`: MPI_Abort(MPI_COMM_WORLD) when MPI is active, so that mpirun
// terminates every other process and exits non-zero; otherwise std::_Exit, which skips at-exit
// handlers (they may block on threads waiting for a lost peer).
[[noreturn]] void abort_job(const std::exception& error, int exit_code = 1);

}  // namespace lockstep::distribute
