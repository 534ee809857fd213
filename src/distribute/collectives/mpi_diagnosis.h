#pragma once
// How the workers of an MPI job find out which of them stopped answering, and how the survivors
// end the job so that each of them has named it first. Internal to the collectives: used by
// MpiCommunicator (which diagnoses a collective that did not complete) and by abort_job (which
// reports and ends the job).
//
// The protocol runs on a communicator of its own (a duplicate of the collective's, so its messages
// never match a collective's):
//   * a rank waiting in a collective answers every "query" (tag kTagQuery) with its own sequence
//     number (kTagReply) while it polls, and so does a rank that is itself diagnosing;
//   * on a timeout a rank queries every peer and waits a grace period: peers that do not answer
//     stopped answering (exited, stopped, hung in a computation, or cut off by the network);
//   * the first diagnosis that found such workers is kept for the process (job_failure_report);
//   * abort_job prints it, sends "reported" (kTagReported) to every survivor and waits, bounded,
//     until each survivor has sent it too, answering late queries meanwhile: only then does it
//     call MPI_Abort, which kills every process of the job, survivors included.
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lockstep::distribute::detail {

inline constexpr int kTagQuery = 1;
inline constexpr int kTagReply = 2;
inline constexpr int kTagReported = 3;

// Answers the diagnosis queries of peers on a control communicator. Replies are sent without
// blocking and kept until MPI has sent them; the destructor frees those still pending (a reply to
// a lost peer never completes).
class QueryResponder {
 public:
  QueryResponder() = default;
  ~QueryResponder();
  QueryResponder(const QueryResponder&) = delete;
  QueryResponder& operator=(const QueryResponder&) = delete;

  // Answers every query that has arrived with `sequence` (the collective this rank is in).
  void serve(MPI_Comm control, uint64_t sequence);

 private:
  struct Reply {
    uint64_t sequence = 0;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  std::vector<std::unique_ptr<Reply>> replies_;
};

// Queries every rank of `control` except `rank` and returns, per rank, whether it answered within
// `grace_seconds` (`rank` itself counts as answered). Serves the peers' own queries meanwhile:
// survivors diagnose at the same moment and must see each other alive. Sleeps between polls.
std::vector<char> ask_peers(MPI_Comm control, int rank, uint64_t sequence, double grace_seconds,
                            QueryResponder& responder);

// Records the first diagnosis of this process that found lost or stalled workers. `report` is the
// error's full text ("Unavailable: ..."); `survivors` are the ranks of `control` that answered
// (this rank excluded). Later calls are ignored.
void record_job_failure(std::string report, MPI_Comm control, int rank, std::vector<int> survivors,
                        uint64_t sequence, double grace_seconds);
// The recorded report, or empty when no collective of this process found a lost worker.
std::string job_failure_report();

// Set once a collective of this process saw a peer fail (before its diagnosis): MPI_Finalize
// would then block on the lost peer, so MpiContext leaves MPI to process teardown.
void mark_job_failed();
bool job_failed();

// Collectives now waiting with a deadline register here, so that a process ending because of a
// consequence of a stuck collective (a local replica that timed out waiting for the one in MPI)
// can let the collective finish its own diagnosis first.
class WaitRegistration {
 public:
  explicit WaitRegistration(double timeout_seconds);
  ~WaitRegistration();
  WaitRegistration(const WaitRegistration&) = delete;
  WaitRegistration& operator=(const WaitRegistration&) = delete;

 private:
  bool registered_ = false;
};
// Returns once no collective with a deadline is waiting any more (each has completed or diagnosed
// its failure), or when the latest deadline plus the longest grace period has passed.
void await_waiting_collectives();

// Tells the other survivors of the recorded failure that this process has reported it, and waits
// until each of them has too (at most a few seconds: they time out at about the same moment),
// answering late diagnosis queries meanwhile. Does nothing when no failure was recorded.
void wait_for_survivors_to_report();

}  // namespace lockstep::distribute::detail
