#include "mpi_communicator.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/error.h"
#include "lockstep/distribute/shared_memory_group.h"
#include "reduce_kernels.h"

namespace lockstep::distribute {
namespace {

using Clock = std::chrono::steady_clock;

// Set once any communicator saw a peer fail: MPI_Finalize would then block on the lost peer.
std::atomic<bool> g_job_failed{false};

constexpr int kTagQuery = 1;
constexpr int kTagReply = 2;

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw Unavailable(std::string(what) + " failed: " + mpi_error_text(rc));
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
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
  if (n > static_cast<size_t>(INT_MAX)) {
    throw InvalidArgument(std::string(what) + ": " + std::to_string(n) +
                          " elements exceed MPI's int count; split the buffer");
  }
  return static_cast<int>(n);
}

// Open MPI's shared-memory transport (btl/vader) moves large messages between processes of one
// host with a single-copy mechanism, by default CMA (process_vm_readv: one system call per
// fragment and, in containers, often refused by the ptrace policy, which makes Open MPI print
// warnings and fall back). For gradient-sized messages (0.1-25 MB) the copy through the shared
// segment was faster on every machine we measured (docs/performance.md, "Multi-worker (MPI)
// throughput": a 407 KB all-reduce between 2 ranks took 25 us instead of 53 us, 23 MB 3.9 ms
// instead of 6.0 ms), so Lockstep makes it the default. MCA settings the user gave (mpirun
// --mca ..., or the OMPI_MCA_ variable) win: setenv with overwrite = 0, before MPI_Init, where
// Open MPI reads its parameters. LOCKSTEP_MPI_TRANSPORT_DEFAULTS=0 turns this off.
void apply_transport_defaults() {
  const char* off = std::getenv("LOCKSTEP_MPI_TRANSPORT_DEFAULTS");
  if (off != nullptr && std::string_view(off) == "0") return;
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", /*overwrite=*/0);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// MpiContext

MpiContext::MpiContext(int* argc, char*** argv) {
  thread_level_ = MPI_THREAD_SINGLE;
  launched_ = env_set("OMPI_COMM_WORLD_SIZE") || env_set("PMIX_RANK") || env_set("PMI_RANK") ||
              env_set("PMI_SIZE");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    MPI_Query_thread(&thread_level_);
  } else if (launched_) {
    apply_transport_defaults();
    check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_), "MPI_Init_thread");
    owns_mpi_ = true;
  } else {
    return;  // a world of one, without MPI
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
}

MpiContext::~MpiContext() {
  finalize();
}

bool MpiContext::active() const {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

std::string_view MpiContext::thread_level_name() const {
  switch (thread_level_) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

std::shared_ptr<Communicator> MpiContext::world(const CommunicationOptions& options) const {
  if (!active()) {
    if (finalized_) throw FailedPrecondition("MpiContext::world: MPI was already finalised");
    return SharedMemoryGroup(1, options).communicator(0);
  }
  return std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, options);
}

void MpiContext::finalize() {
  if (finalized_) return;
  finalized_ = true;
  if (!owns_mpi_ || g_job_failed.load()) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

MpiContext& mpi_initialize(int* argc, char*** argv) {
  // A function-local static: constructed once, thread-safely, and destroyed (finalising MPI) at
  // exit after main returns.
  static MpiContext context(argc, argv);
  return context;
}

// ---------------------------------------------------------------------------------------------
// MpiCommunicator

// A reply to a peer's diagnosis query, kept alive until MPI has sent it.
struct MpiCommunicator::PendingReply {
  uint64_t sequence = 0;
  MPI_Request request = MPI_REQUEST_NULL;
};

MpiCommunicator::MpiCommunicator(MPI_Comm comm, const CommunicationOptions& options)
    : Communicator(options) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    throw FailedPrecondition(
        "MpiCommunicator: MPI is not active; call mpi_initialize() first (under mpirun)");
  }
  check_mpi(MPI_Comm_dup(comm, &data_), "MPI_Comm_dup");
  check_mpi(MPI_Comm_dup(comm, &control_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(data_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(data_, &rank_);
  MPI_Comm_size(data_, &size_);

  struct Wire {
    int32_t pid;
    char host[64];
  };
  Wire mine{};
  mine.pid = static_cast<int32_t>(getpid());
  gethostname(mine.host, sizeof mine.host - 1);
  std::vector<Wire> all(static_cast<size_t>(size_));
  check_mpi(
      MPI_Allgather(&mine, sizeof(Wire), MPI_BYTE, all.data(), sizeof(Wire), MPI_BYTE, control_),
      "MPI_Allgather (peer exchange)");
  for (const Wire& w : all) peers_.push_back({w.pid, std::string(w.host, strnlen(w.host, 64))});
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& r : replies_) {
    if (r->request != MPI_REQUEST_NULL) MPI_Request_free(&r->request);
  }
  // Freeing a communicator with a collective still pending on a lost peer can block: after a
  // failure leave them to process teardown (abort_job).
  if (broken_) return;
  MPI_Comm_free(&data_);
  MPI_Comm_free(&control_);
}

void MpiCommunicator::check_usable() const {
  if (!broken_) return;
  if (error_is_deadline_) throw DeadlineExceeded(error_);
  throw Unavailable(error_);
}

size_t MpiCommunicator::pack_elements(size_t element_size) const {
  size_t n = static_cast<size_t>(INT_MAX);
  if (options().bytes_per_pack > 0)
    n = std::max<size_t>(1, options().bytes_per_pack / element_size);
  return std::min(n, static_cast<size_t>(INT_MAX));
}

void MpiCommunicator::serve_queries() {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kTagQuery, control_, &flag, &status) != MPI_SUCCESS || !flag) {
      break;
    }
    uint64_t their_sequence = 0;
    MPI_Recv(&their_sequence, 1, MPI_UINT64_T, status.MPI_SOURCE, kTagQuery, control_,
             MPI_STATUS_IGNORE);
    auto reply = std::make_unique<PendingReply>();
    reply->sequence = sequence();
    MPI_Isend(&reply->sequence, 1, MPI_UINT64_T, status.MPI_SOURCE, kTagReply, control_,
              &reply->request);
    replies_.push_back(std::move(reply));
  }
  std::erase_if(replies_, [](const std::unique_ptr<PendingReply>& r) {
    int done = 0;
    MPI_Test(&r->request, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
}

void MpiCommunicator::wait(MPI_Request* request) {
  const auto start = Clock::now();
  const double timeout = options().timeout_seconds;
  for (uint64_t polls = 0;; ++polls) {
    int done = 0;
    const int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) fail("MPI reported an error: " + mpi_error_text(rc));
    if (done) return;
    if ((polls & 255) == 255) {
      serve_queries();
      if (timeout > 0 && std::chrono::duration<double>(Clock::now() - start).count() > timeout) {
        fail("");
      }
      // Oversubscribed processes (more ranks than cores) must hand the core to the peer being
      // waited for; a yield costs nothing when nobody else is runnable.
      sched_yield();
    }
  }
}

// Diagnoses a collective that did not complete: asks every peer, on the control communicator,
// which collective it is in; peers that do not answer within a grace period are reported lost.
void MpiCommunicator::fail(const std::string& cause) {
  g_job_failed.store(true);
  const double timeout = options().timeout_seconds;
  const double grace = std::clamp(0.1 * timeout, 0.5, 2.0);
  const std::string what = describe_current();

  std::vector<uint64_t> answer(static_cast<size_t>(size_), 0);
  std::vector<MPI_Request> receives(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  std::vector<char> answered(static_cast<size_t>(size_), 0);
  uint64_t my_sequence = sequence();
  std::vector<MPI_Request> queries;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    MPI_Request q;
    if (MPI_Isend(&my_sequence, 1, MPI_UINT64_T, p, kTagQuery, control_, &q) == MPI_SUCCESS) {
      queries.push_back(q);
    }
    MPI_Irecv(&answer[static_cast<size_t>(p)], 1, MPI_UINT64_T, p, kTagReply, control_,
              &receives[static_cast<size_t>(p)]);
  }
  answered[static_cast<size_t>(rank_)] = 1;
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(grace));
  int pending = size_ - 1;
  while (pending > 0 && Clock::now() < until) {
    for (int p = 0; p < size_; ++p) {
      auto& req = receives[static_cast<size_t>(p)];
      if (answered[static_cast<size_t>(p)] || req == MPI_REQUEST_NULL) continue;
      int done = 0;
      if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) {
        answered[static_cast<size_t>(p)] = 1;
        --pending;
      }
    }
    serve_queries();  // the other survivors are diagnosing too and ask us
    sched_yield();
  }
  // Requests to or from a lost peer never complete; they are left to process teardown.
  for (auto& q : queries) MPI_Request_free(&q);

  std::string lost;
  int n_lost = 0;
  char my_host[64] = {};
  gethostname(my_host, sizeof my_host - 1);
  for (int p = 0; p < size_; ++p) {
    if (answered[static_cast<size_t>(p)]) continue;
    const Peer& peer = peers_[static_cast<size_t>(p)];
    std::string fate = "it has exited or stalled";
    if (peer.host == my_host) {
      if (kill(peer.pid, 0) != 0 && errno == ESRCH)
        fate = "it has exited (no such process)";
      else
        fate = "it is still running but not communicating (stalled)";
    }
    if (!lost.empty()) lost += "; ";
    lost += "worker rank " + std::to_string(p) + " (pid " + std::to_string(peer.pid) + " on host " +
            peer.host + ") did not join " + what;
    if (timeout > 0) lost += " within " + seconds_text(timeout) + " s";
    lost += "; " + fate;
    ++n_lost;
  }
  const std::string prefix =
      "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": ";
  if (n_lost > 0) {
    error_ = prefix + lost + (cause.empty() ? "" : " (" + cause + ")") + ".";
    error_is_deadline_ = false;
  } else if (!cause.empty()) {
    error_ = prefix + what + " failed: " + cause + "; every peer still answers.";
    error_is_deadline_ = false;
  } else {
    error_ = prefix + what + " did not complete within " + seconds_text(timeout) +
             " s (CommunicationOptions::timeout_seconds), although every peer is alive and " +
             "waiting in a collective; a rank may have called a different collective.";
    error_is_deadline_ = true;
  }
  broken_ = true;
  check_usable();
  throw Internal("unreachable");
}

void MpiCommunicator::do_all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  check_usable();
  if (dtype == DType::bfloat16) {
    widened_send_.resize(count);
    bfloat16_to_float(static_cast<const bfloat16*>(buf), widened_send_.data(), count);
    do_all_reduce(widened_send_.data(), count, DType::float32,
                  op == ReduceOp::MEAN ? ReduceOp::SUM : op);
    if (op == ReduceOp::MEAN)
      detail::divide_in_place(widened_send_.data(), count, DType::float32, size_);
    float_to_bfloat16(widened_send_.data(), static_cast<bfloat16*>(buf), count);
    return;
  }
  all_reduce_in_packs(buf, count, dtype_size(dtype), mpi_type(dtype), mpi_op(op));
  if (op == ReduceOp::MEAN) detail::divide_in_place(buf, count, dtype, size_);
}

namespace {

// inout[i] <- bfloat16(float(in[i]) + float(inout[i])): one partial sum, rounded once. Float
// addition is commutative bit for bit, so MPI may combine in any order it fixes.
void bfloat16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const bfloat16*>(in);
  auto* b = static_cast<bfloat16*>(inout);
  for (int i = 0; i < *len; ++i) {
    b[i] = bfloat16(static_cast<float>(a[i]) + static_cast<float>(b[i]));
  }
}

struct Bfloat16Wire {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op sum = MPI_OP_NULL;
};

// Created on first use (MPI is initialised by then) and kept until MPI_Finalize frees it.
const Bfloat16Wire& bfloat16_wire() {
  static const Bfloat16Wire wire = [] {
    Bfloat16Wire w;
    check_mpi(MPI_Type_contiguous(2, MPI_BYTE, &w.type), "MPI_Type_contiguous");
    check_mpi(MPI_Type_commit(&w.type), "MPI_Type_commit");
    check_mpi(MPI_Op_create(&bfloat16_sum, /*commute=*/1, &w.sum), "MPI_Op_create");
    return w;
  }();
  return wire;
}

}  // namespace

void MpiCommunicator::do_all_reduce_compressed(bfloat16* buf, size_t count) {
  check_usable();
  const Bfloat16Wire& wire = bfloat16_wire();
  all_reduce_in_packs(buf, count, sizeof(bfloat16), wire.type, wire.sum);
}

// Without a deadline (timeout_seconds 0: wait forever) the blocking MPI_Allreduce serves: Open
// MPI's blocking algorithms (coll/tuned) were faster here than the non-blocking ones (libnbc) —
// 25 vs 38 us for the seed model's 407 KB between 2 ranks, 3.8 vs 6.9 ms for 23 MB
// (bench/mpi_allreduce_bench) — and there is nothing to poll for. With a deadline the
// non-blocking call is polled so that a lost peer is reported instead of waited for.
// In place, in packs of at most bytes_per_pack (one call even for count 0, so every rank takes
// part in the same number of collectives).
void MpiCommunicator::all_reduce_in_packs(void* buf, size_t count, size_t element_size,
                                          MPI_Datatype type, MPI_Op op) {
  const size_t pack = pack_elements(element_size);
  for (size_t begin = 0; begin < count || (count == 0 && begin == 0); begin += pack) {
    void* at = static_cast<std::byte*>(buf) + begin * element_size;
    const int n = static_cast<int>(std::min(pack, count - begin));
    if (options().timeout_seconds <= 0) {
      const int rc = MPI_Allreduce(MPI_IN_PLACE, at, n, type, op, data_);
      if (rc != MPI_SUCCESS) fail("MPI_Allreduce: " + mpi_error_text(rc));
    } else {
      MPI_Request request;
      const int rc = MPI_Iallreduce(MPI_IN_PLACE, at, n, type, op, data_, &request);
      if (rc != MPI_SUCCESS) fail("MPI_Iallreduce: " + mpi_error_text(rc));
      wait(&request);
    }
    if (count == 0) break;
  }
}

void MpiCommunicator::do_reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                        ReduceOp op) {
  check_usable();
  const BlockRange mine = block_range(count, size_, rank_);
  if (dtype == DType::bfloat16) {
    widened_send_.resize(count);
    widened_recv_.resize(mine.size());
    bfloat16_to_float(static_cast<const bfloat16*>(send), widened_send_.data(), count);
    do_reduce_scatter(widened_send_.data(), widened_recv_.data(), count, DType::float32,
                      op == ReduceOp::MEAN ? ReduceOp::SUM : op);
    if (op == ReduceOp::MEAN) {
      detail::divide_in_place(widened_recv_.data(), mine.size(), DType::float32, size_);
    }
    float_to_bfloat16(widened_recv_.data(), static_cast<bfloat16*>(recv), mine.size());
    return;
  }
  std::vector<int> counts(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    counts[static_cast<size_t>(r)] =
        to_int_count(block_range(count, size_, r).size(), "reduce_scatter");
  }
  MPI_Request request;
  const int rc =
      MPI_Ireduce_scatter(send, recv, counts.data(), mpi_type(dtype), mpi_op(op), data_, &request);
  if (rc != MPI_SUCCESS) fail("MPI_Ireduce_scatter: " + mpi_error_text(rc));
  wait(&request);
  if (op == ReduceOp::MEAN) detail::divide_in_place(recv, mine.size(), dtype, size_);
}

void MpiCommunicator::do_all_gather(const void* send, void* recv, size_t count_per_rank,
                                    DType dtype) {
  check_usable();
  const size_t bytes = count_per_rank * dtype_size(dtype);
  const int n = to_int_count(bytes, "all_gather (bytes per rank)");
  // MPI forbids aliasing send and recv; the aliased form is spelled MPI_IN_PLACE.
  const void* source =
      send == static_cast<const std::byte*>(recv) + static_cast<size_t>(rank_) * bytes
          ? MPI_IN_PLACE
          : send;
  MPI_Request request;
  const int rc = MPI_Iallgather(source, n, MPI_BYTE, recv, n, MPI_BYTE, data_, &request);
  if (rc != MPI_SUCCESS) fail("MPI_Iallgather: " + mpi_error_text(rc));
  wait(&request);
}

void MpiCommunicator::do_broadcast(void* buf, size_t count, DType dtype, int root) {
  check_usable();
  const size_t bytes = count * dtype_size(dtype);
  const size_t pack = pack_elements(1);
  for (size_t begin = 0; begin < bytes || (bytes == 0 && begin == 0); begin += pack) {
    const size_t n = std::min(pack, bytes - begin);
    MPI_Request request;
    const int rc = MPI_Ibcast(static_cast<std::byte*>(buf) + begin, static_cast<int>(n), MPI_BYTE,
                              root, data_, &request);
    if (rc != MPI_SUCCESS) fail("MPI_Ibcast: " + mpi_error_text(rc));
    wait(&request);
    if (bytes == 0) break;
  }
}

void MpiCommunicator::do_barrier() {
  check_usable();
  MPI_Request request;
  const int rc = MPI_Ibarrier(data_, &request);
  if (rc != MPI_SUCCESS) fail("MPI_Ibarrier: " + mpi_error_text(rc));
  wait(&request);
}

}  // namespace lockstep::distribute
