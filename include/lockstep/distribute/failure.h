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
#include <string>

namespace lockstep::distribute {

// What to report for `error`. When a cross-worker collective of this process found workers that
// stopped answering, that diagnosis is the cause, whatever surfaced first: a local replica that
// timed out waiting for the replica inside the stuck collective throws too, and its message names
// only a local thread. Returns "<diagnosis> (on this worker it surfaced as: <error.what()>)" then,
// else error.what().
std::string failure_message(const std::exception& error);

// Prints "lockstep: fatal: <failure_message(error)>" (with the world rank when MPI is active) to
// stderr and ends the whole job with `exit_code`: MPI_Abort(MPI_COMM_WORLD) when MPI is active, so
// that mpirun terminates every other process and exits non-zero; otherwise std::_Exit, which skips
// at-exit handlers (they may block on threads waiting for a lost peer). In a job that lost a
// worker, it first
//   * lets a cross-worker collective still waiting in this process finish its diagnosis, when
//     `error` is itself a timeout or an Unavailable (at most its deadline plus the grace period);
//   * after printing, waits (a few seconds at most) until every other survivor of the collective
//     has printed its own report, so that MPI_Abort does not kill a survivor before it has named
//     the lost worker.
[[noreturn]] void abort_job(const std::exception& error, int exit_code = 1);

}  // namespace lockstep::distribute
