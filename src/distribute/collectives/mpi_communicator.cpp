#include "mpi_communicator.h"

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
#include <fstream>
#include <map>

#include "host_shared_reducer.h"
#include "lockstep/core/bfloat16.h"
#include "lockstep/core/error.h"
#include "lockstep/distribute/shared_memory_group.h"
#include "mpi_diagnosis.h"
#include "poll_backoff.h"
#include "reduce_kernels.h"
#include "seconds_text.h"

namespace lockstep::distribute {
namespace {

using Clock = std::chrono::steady_clock;

// Set once any communicator saw a peer fail: MPI_Finalize would then block on the lost peer.
std::atomic<bool> g_job_failed{false};

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

constexpr size_t kHostBytes = 64;

std::string local_host_name() {
  char host[kHostBytes] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

// What the kernel says about a process of this host that does not answer: /proc/<pid>/stat's
// state letter tells a stopped process (SIGSTOP, job control, a debugger) from a busy one.
std::string local_process_fate(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return "it has exited (no such process)";
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  // The state follows the command name, which is in parentheses and may itself contain ") ".
  const size_t close = line.rfind(')');
  const char state = close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
  switch (state) {
    case 'T':
    case 't':
      return "it is stopped (process state " + std::string(1, state) +
             ": SIGSTOP, job control or a debugger)";
    case 'Z':
      return "it has exited (a zombie not yet reaped)";
    case 'D':
      return "it is blocked in the kernel (process state D: uninterruptible I/O)";
    default:
      return "it is still running but not communicating (stalled: a long computation, a "
             "deadlock, or a different collective)";
  }
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

std::vector<std::string> MpiContext::world_hosts() const {
  if (!active()) return {local_host_name()};
  struct Wire {
    char host[kHostBytes];
  };
  Wire mine{};
  const std::string host = local_host_name();
  std::memcpy(mine.host, host.data(), std::min(host.size(), sizeof mine.host - 1));
  std::vector<Wire> all(static_cast<size_t>(world_size_));
  check_mpi(MPI_Allgather(&mine, sizeof(Wire), MPI_BYTE, all.data(), sizeof(Wire), MPI_BYTE,
                          MPI_COMM_WORLD),
            "MPI_Allgather (host names)");
  std::vector<std::string> hosts;
  for (const Wire& w : all) hosts.emplace_back(w.host, strnlen(w.host, sizeof w.host));
  return hosts;
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

  responder_ = std::make_unique<detail::QueryResponder>();

  struct Wire {
    int32_t world_rank;
    int32_t pid;
    char host[kHostBytes];
  };
  Wire mine{};
  MPI_Comm_rank(MPI_COMM_WORLD, &mine.world_rank);
  mine.pid = static_cast<int32_t>(getpid());
  const std::string host = local_host_name();
  std::memcpy(mine.host, host.data(), std::min(host.size(), sizeof mine.host - 1));
  std::vector<Wire> all(static_cast<size_t>(size_));
  check_mpi(
      MPI_Allgather(&mine, sizeof(Wire), MPI_BYTE, all.data(), sizeof(Wire), MPI_BYTE, control_),
      "MPI_Allgather (peer exchange)");
  for (const Wire& w : all) {
    peers_.push_back({w.world_rank, w.pid, std::string(w.host, strnlen(w.host, sizeof w.host))});
  }
  const bool one_host = std::all_of(peers_.begin(), peers_.end(),
                                    [&](const Peer& p) { return p.host == peers_[0].host; });
  const char* shared = std::getenv("LOCKSTEP_MPI_HOST_SHARED");
  const bool enabled = shared == nullptr || std::string_view(shared) != "0";
  host_shared_ = detail::HostSharedReducer::create(control_, rank_, size_, one_host, enabled);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  responder_.reset();
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

void MpiCommunicator::wait(MPI_Request* request, size_t bytes) {
  const double timeout = options().timeout_seconds;
  detail::WaitRegistration registration(timeout);
  detail::PollBackoff backoff(detail::PollBackoff::spin_for_bytes(bytes));
  for (;;) {
    int done = 0;
    const int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) fail("MPI reported an error: " + mpi_error_text(rc));
    if (done) return;
    if (backoff.pause()) {
      responder_->serve(control_, sequence());
      if (timeout > 0 && backoff.waited_seconds() > timeout) fail("");
    }
  }
}

// "world rank 1 (pid 1234 on host node-a) stopped answering: it did not join all_reduce #57 ...
// within 10 s; it is stopped (...)", one clause per lost worker; when every worker of another host
// is lost, one clause naming the host.
std::string MpiCommunicator::describe_lost(const std::vector<char>& answered) const {
  const double timeout = options().timeout_seconds;
  const std::string joined =
      "did not join " + describe_current() +
      (timeout > 0 ? " within " + detail::seconds_text(timeout) + " s" : std::string());
  auto who = [&](int p) {
    const Peer& peer = peers_[static_cast<size_t>(p)];
    return "world rank " + std::to_string(peer.world_rank) + " (pid " + std::to_string(peer.pid) +
           " on host " + peer.host + ")";
  };
  // Hosts in the order of their first lost worker; for each, its workers and how many are lost.
  std::vector<std::string> order;
  std::map<std::string, std::pair<std::vector<int>, int>> by_host;  // lost ranks, all workers
  for (int p = 0; p < size_; ++p) {
    const std::string& host = peers_[static_cast<size_t>(p)].host;
    auto& entry = by_host[host];
    ++entry.second;
    if (answered[static_cast<size_t>(p)]) continue;
    if (entry.first.empty()) order.push_back(host);
    entry.first.push_back(p);
  }
  const std::string& my_host = peers_[static_cast<size_t>(rank_)].host;
  std::string text;
  for (const std::string& host : order) {
    const auto& [lost, workers] = by_host[host];
    if (!text.empty()) text += "; ";
    if (host != my_host && static_cast<int>(lost.size()) == workers) {
      text += "host " + host + " is unreachable or down: none of its workers answered (";
      for (size_t i = 0; i < lost.size(); ++i) text += (i ? ", " : "") + who(lost[i]);
      text += lost.size() == 1 ? "; it " : "; they ";
      text += joined + ")";
      continue;
    }
    for (size_t i = 0; i < lost.size(); ++i) {
      if (i) text += "; ";
      text += who(lost[i]) + " stopped answering: it " + joined + "; ";
      text += host == my_host ? local_process_fate(peers_[static_cast<size_t>(lost[i])].pid)
                              : "it is on another host (exited, stopped or hung)";
    }
  }
  return text;
}

// Diagnoses a collective that did not complete: asks every peer, on the control communicator,
// which collective it is in; peers that do not answer within a grace period are reported lost.
void MpiCommunicator::fail(const std::string& cause) {
  g_job_failed.store(true);
  const double timeout = options().timeout_seconds;
  const double grace = std::clamp(0.1 * timeout, 0.5, 2.0);
  const std::string what = describe_current();
  const std::vector<char> answered =
      detail::ask_peers(control_, rank_, sequence(), grace, *responder_);
  std::vector<int> survivors;
  int n_lost = 0;
  for (int p = 0; p < size_; ++p) {
    if (!answered[static_cast<size_t>(p)])
      ++n_lost;
    else if (p != rank_)
      survivors.push_back(p);
  }
  const std::string prefix =
      "world rank " + std::to_string(peers_[static_cast<size_t>(rank_)].world_rank) + ": ";
  if (n_lost > 0) {
    error_ = describe_lost(answered) + (cause.empty() ? "" : " (" + cause + ")") +
             ". Seen from world rank " +
             std::to_string(peers_[static_cast<size_t>(rank_)].world_rank) + ".";
    error_is_deadline_ = false;
    detail::record_job_failure(Unavailable(error_).what(), control_, rank_, std::move(survivors),
                               sequence(), grace);
  } else if (!cause.empty()) {
    error_ = prefix + what + " failed: " + cause + "; every peer still answers.";
    error_is_deadline_ = false;
  } else {
    error_ = prefix + what + " did not complete within " + detail::seconds_text(timeout) +
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
  if (host_shared_) {
    const double timeout = options().timeout_seconds;
    detail::WaitRegistration registration(timeout);
    const auto start = Clock::now();
    host_shared_->all_reduce(buf, count, dtype, op, [&] {
      responder_->serve(control_, sequence());
      if (timeout > 0 && std::chrono::duration<double>(Clock::now() - start).count() > timeout)
        fail("");
    });
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
  // Between ranks of one host the bytes cross memory, not a wire: sum exactly in float32 and round
  // once (within the rounding bound the compressed form promises).
  if (host_shared_) {
    do_all_reduce(buf, count, DType::bfloat16, ReduceOp::SUM);
    return;
  }
  const Bfloat16Wire& wire = bfloat16_wire();
  all_reduce_in_packs(buf, count, sizeof(bfloat16), wire.type, wire.sum);
}

// Always the non-blocking MPI_Iallreduce, waited for by wait(), also without a deadline. Open MPI's
// blocking MPI_Allreduce (coll/tuned) is a little faster on an idle machine (25 vs 38 us for the
// seed model's 407 KB between 2 ranks) but busy-polls inside Open MPI for as long as the slowest
// rank takes; with one co-runner process beside `mpirun -np 2` on 2 cores that spinning rank holds
// a core its peer needs (docs/distributed.md, "Waiting without spinning").
// In place, in packs of at most bytes_per_pack (one call even for count 0, so every rank takes
// part in the same number of collectives).
void MpiCommunicator::all_reduce_in_packs(void* buf, size_t count, size_t element_size,
                                          MPI_Datatype type, MPI_Op op) {
  const size_t pack = pack_elements(element_size);
  for (size_t begin = 0; begin < count || (count == 0 && begin == 0); begin += pack) {
    void* at = static_cast<std::byte*>(buf) + begin * element_size;
    const int n = static_cast<int>(std::min(pack, count - begin));
    MPI_Request request;
    const int rc = MPI_Iallreduce(MPI_IN_PLACE, at, n, type, op, data_, &request);
    if (rc != MPI_SUCCESS) fail("MPI_Iallreduce: " + mpi_error_text(rc));
    wait(&request, static_cast<size_t>(n) * element_size);
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
  wait(&request, count * dtype_size(dtype));
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
  wait(&request, bytes * static_cast<size_t>(size_));
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
    wait(&request, n);
    if (bytes == 0) break;
  }
}

void MpiCommunicator::do_barrier() {
  check_usable();
  MPI_Request request;
  const int rc = MPI_Ibarrier(data_, &request);
  if (rc != MPI_SUCCESS) fail("MPI_Ibarrier: " + mpi_error_text(rc));
  wait(&request, 0);
}

}  // namespace lockstep::distribute
