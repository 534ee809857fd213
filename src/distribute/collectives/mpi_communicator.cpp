// MpiCommunicator: the collectives over MPI, each a non-blocking MPI call polled until done or
// past its deadline (failure diagnosis: mpi_communicator_failure.cpp).
#include "mpi_communicator.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "host_shared_reducer.h"
#include "lockstep/core/bfloat16.h"
#include "lockstep/core/check.h"
#include "lockstep/core/error.h"
#include "mpi_bfloat16.h"
#include "mpi_diagnosis.h"
#include "mpi_support.h"
#include "poll_backoff.h"
#include "rank_affinity.h"
#include "reduce_kernels.h"

namespace lockstep::distribute {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

using detail::check_mpi;
using detail::kHostBytes;
using detail::local_host_name;
using detail::mpi_error_text;
using detail::mpi_op;
using detail::mpi_type;
using detail::to_int_count;

MpiCommunicator::MpiCommunicator(MPI_Comm comm, const CommunicationOptions& options)
    : Communicator(options) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  LOCKSTEP_CHECK_AS(FailedPrecondition, initialized && !finalized,
                    "MpiCommunicator: MPI is not active; call mpi_initialize() first (under "
                    "mpirun)");
  check_mpi(MPI_Comm_dup(comm, &data_), "MPI_Comm_dup");
  check_mpi(MPI_Comm_dup(comm, &control_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(data_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(data_, &rank_);
  MPI_Comm_size(data_, &size_);

  // Before any collective, so that a bad value fails every rank that has it at the same point.
  const detail::RankAffinity affinity = detail::rank_affinity_from_environment();
  responder_ = std::make_unique<detail::QueryResponder>();

  struct Wire {
    int32_t world_rank;
    int32_t pid;
    char host[kHostBytes];
    cpu_set_t cpus;  // the calling thread's affinity: the launcher's binding of this rank
  };
  Wire mine{};
  MPI_Comm_rank(MPI_COMM_WORLD, &mine.world_rank);
  mine.pid = static_cast<int32_t>(getpid());
  const std::string host = local_host_name();
  std::memcpy(mine.host, host.data(), std::min(host.size(), sizeof mine.host - 1));
  CPU_ZERO(&mine.cpus);
  const bool known_cpus = sched_getaffinity(0, sizeof mine.cpus, &mine.cpus) == 0;
  std::vector<Wire> all(static_cast<size_t>(size_));
  check_mpi(
      MPI_Allgather(&mine, sizeof(Wire), MPI_BYTE, all.data(), sizeof(Wire), MPI_BYTE, control_),
      "MPI_Allgather (peer exchange)");
  std::vector<detail::RankCpus> cpus;
  for (const Wire& w : all) {
    peers_.push_back({w.world_rank, w.pid, std::string(w.host, strnlen(w.host, sizeof w.host))});
    cpus.push_back({peers_.back().host, w.cpus});
  }
  if (affinity == detail::RankAffinity::job && known_cpus) {
    const cpu_set_t job = detail::job_cpus_on_host(cpus, peers_[static_cast<size_t>(rank_)].host);
    if (!CPU_EQUAL(&job, &mine.cpus)) widened_threads_ = detail::widen_threads(mine.cpus, job);
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

void MpiCommunicator::do_all_reduce_compressed(bfloat16* buf, size_t count) {
  check_usable();
  // Between ranks of one host the bytes cross memory, not a wire: sum exactly in float32 and round
  // once (within the rounding bound the compressed form promises).
  if (host_shared_) {
    do_all_reduce(buf, count, DType::bfloat16, ReduceOp::SUM);
    return;
  }
  const detail::Bfloat16Wire& wire = detail::bfloat16_wire();
  all_reduce_in_packs(buf, count, sizeof(bfloat16), wire.type, wire.sum);
}

// Always the non-blocking MPI_Iallreduce, waited for by wait(), also without a deadline. Open MPI's
// blocking MPI_Allreduce (coll/tuned) is a little faster on an idle machine (docs/performance.md,
// "Multi-worker (MPI) throughput") but busy-polls inside Open MPI for as long as the slowest
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
