#include "mpi_diagnosis.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <utility>

#include "poll_backoff.h"

namespace lockstep::distribute::detail {
namespace {

using Clock = std::chrono::steady_clock;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// The longest grace period a diagnosis takes (see MpiCommunicator::fail).
constexpr double kMaxGraceSeconds = 2.0;

struct JobFailure {
  std::string report;
  MPI_Comm control = MPI_COMM_NULL;
  int rank = 0;
  std::vector<int> survivors;
  uint64_t sequence = 0;
  double grace_seconds = 0;
};

std::mutex g_failure_mutex;
std::optional<JobFailure> g_failure;

std::mutex g_wait_mutex;
std::condition_variable g_wait_done;
int g_waiting = 0;
Clock::time_point g_latest_deadline{};

// Polls `pending` requests until each completes or `deadline` passes, serving queries meanwhile.
// Returns which completed.
std::vector<char> poll_until(std::vector<MPI_Request>& pending, Clock::time_point deadline,
                             MPI_Comm control, uint64_t sequence, QueryResponder& responder) {
  std::vector<char> done(pending.size(), 0);
  size_t left = 0;
  for (size_t i = 0; i < pending.size(); ++i) {
    if (pending[i] == MPI_REQUEST_NULL)
      done[i] = 1;
    else
      ++left;
  }
  PollBackoff backoff;
  while (left > 0 && Clock::now() < deadline) {
    for (size_t i = 0; i < pending.size(); ++i) {
      if (done[i]) continue;
      int flag = 0;
      if (MPI_Test(&pending[i], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) {
        done[i] = 1;
        --left;
      }
    }
    if (left > 0 && backoff.pause()) responder.serve(control, sequence);
  }
  return done;
}

// Message buffers of requests that may outlive the function that started them.
struct PendingBuffers {
  uint64_t token = 0;            // what we send
  std::vector<uint64_t> values;  // what we receive, one per peer
};

// Frees the requests; the buffers too when every request has completed, else they are left for
// the process's end (a send to a lost peer may never complete; a receive is cancelled, but one
// already matched may still be written to).
void release(PendingBuffers* buffers, std::vector<MPI_Request>& sends,
             std::vector<MPI_Request>& receives) {
  bool all_done = true;
  for (auto* requests : {&sends, &receives}) {
    for (auto& r : *requests) {
      if (r == MPI_REQUEST_NULL) continue;
      int done = 0;
      MPI_Test(&r, &done, MPI_STATUS_IGNORE);
      if (done) continue;
      all_done = false;
      if (requests == &receives) MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
  }
  if (all_done) delete buffers;
}

}  // namespace

QueryResponder::~QueryResponder() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& r : replies_) {
    if (r->request != MPI_REQUEST_NULL) MPI_Request_free(&r->request);
  }
}

void QueryResponder::serve(MPI_Comm control, uint64_t sequence) {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kTagQuery, control, &flag, &status) != MPI_SUCCESS || !flag) {
      break;
    }
    uint64_t their_sequence = 0;
    MPI_Recv(&their_sequence, 1, MPI_UINT64_T, status.MPI_SOURCE, kTagQuery, control,
             MPI_STATUS_IGNORE);
    auto reply = std::make_unique<Reply>();
    reply->sequence = sequence;
    MPI_Isend(&reply->sequence, 1, MPI_UINT64_T, status.MPI_SOURCE, kTagReply, control,
              &reply->request);
    replies_.push_back(std::move(reply));
  }
  std::erase_if(replies_, [](const std::unique_ptr<Reply>& r) {
    int done = 0;
    MPI_Test(&r->request, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
}

std::vector<char> ask_peers(MPI_Comm control, int rank, uint64_t sequence, double grace_seconds,
                            QueryResponder& responder) {
  int size = 1;
  MPI_Comm_size(control, &size);
  const auto n = static_cast<size_t>(size);
  // MPI may still read or write these after we give up on a lost peer (its requests are freed,
  // not completed), so they live until the process ends whenever a request is left behind.
  auto* buffers = new PendingBuffers{sequence, std::vector<uint64_t>(n, 0)};
  std::vector<MPI_Request> receives(n, MPI_REQUEST_NULL);
  std::vector<MPI_Request> queries;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    MPI_Request q;
    if (MPI_Isend(&buffers->token, 1, MPI_UINT64_T, p, kTagQuery, control, &q) == MPI_SUCCESS) {
      queries.push_back(q);
    }
    MPI_Irecv(&buffers->values[static_cast<size_t>(p)], 1, MPI_UINT64_T, p, kTagReply, control,
              &receives[static_cast<size_t>(p)]);
  }
  std::vector<char> answered =
      poll_until(receives, Clock::now() + seconds(grace_seconds), control, sequence, responder);
  answered[static_cast<size_t>(rank)] = 1;
  release(buffers, queries, receives);
  return answered;
}

void record_job_failure(std::string report, MPI_Comm control, int rank, std::vector<int> survivors,
                        uint64_t sequence, double grace_seconds) {
  std::lock_guard lock(g_failure_mutex);
  if (g_failure) return;
  g_failure =
      JobFailure{std::move(report), control, rank, std::move(survivors), sequence, grace_seconds};
}

std::string job_failure_report() {
  std::lock_guard lock(g_failure_mutex);
  return g_failure ? g_failure->report : std::string();
}

namespace {
std::atomic<bool> g_job_failed{false};
}  // namespace

void mark_job_failed() {
  g_job_failed.store(true);
}
bool job_failed() {
  return g_job_failed.load();
}

WaitRegistration::WaitRegistration(double timeout_seconds) {
  if (!(timeout_seconds > 0)) return;
  std::lock_guard lock(g_wait_mutex);
  ++g_waiting;
  g_latest_deadline = std::max(g_latest_deadline, Clock::now() + seconds(timeout_seconds));
  registered_ = true;
}

WaitRegistration::~WaitRegistration() {
  if (!registered_) return;
  {
    std::lock_guard lock(g_wait_mutex);
    --g_waiting;
  }
  g_wait_done.notify_all();
}

void await_waiting_collectives() {
  std::unique_lock lock(g_wait_mutex);
  if (g_waiting == 0) return;
  // The deadline, the diagnosis's grace period, and a margin for a descheduled waiter.
  g_wait_done.wait_until(lock, g_latest_deadline + seconds(kMaxGraceSeconds + 1.0),
                         [] { return g_waiting == 0; });
}

void wait_for_survivors_to_report() {
  JobFailure failure;
  {
    std::lock_guard lock(g_failure_mutex);
    if (!g_failure || g_failure->survivors.empty()) return;
    failure = *g_failure;
  }
  const size_t n = failure.survivors.size();
  auto* buffers = new PendingBuffers{failure.sequence, std::vector<uint64_t>(n, 0)};
  std::vector<MPI_Request> receives(n, MPI_REQUEST_NULL);
  std::vector<MPI_Request> sends;
  for (size_t i = 0; i < n; ++i) {
    const int peer = failure.survivors[i];
    MPI_Request s;
    if (MPI_Isend(&buffers->token, 1, MPI_UINT64_T, peer, kTagReported, failure.control, &s) ==
        MPI_SUCCESS) {
      sends.push_back(s);
    }
    MPI_Irecv(&buffers->values[i], 1, MPI_UINT64_T, peer, kTagReported, failure.control,
              &receives[i]);
  }
  // The survivors are stuck in the same collective, so their deadlines passed within a step of
  // ours and they report after the same grace period. Wait for that twice over, plus a margin for
  // a loaded machine; a survivor slower than that is ended by MPI_Abort before it has reported.
  QueryResponder responder;
  poll_until(receives, Clock::now() + seconds(2 * failure.grace_seconds + 3.0), failure.control,
             failure.sequence, responder);
  release(buffers, sends, receives);
}

}  // namespace lockstep::distribute::detail
