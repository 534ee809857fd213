#pragma once
// MpiCommunicator: the Communicator over MPI that MpiContext::world() returns (see
// lockstep/distribute/mpi_context.h). Internal: it names MPI's types, and the installed headers do
// not include <mpi.h>.
#include <mpi.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/distribute/collective.h"
#include "lockstep/distribute/mpi_context.h"

namespace lockstep::distribute {

namespace detail {
class QueryResponder;
class HostSharedReducer;
}  // namespace detail

class MpiCommunicator final : public Communicator {
 public:
  struct Peer {
    int world_rank = 0;  // in MPI_COMM_WORLD, which is what mpirun and users call the rank
    int pid = 0;
    std::string host;
  };

  // Collective over `comm`: duplicates it twice (one for data, one for failure diagnosis, so that
  // diagnosis messages can never match a collective), sets MPI_ERRORS_RETURN on both, and exchanges
  // every rank's world rank, pid, host name and CPU affinity (from which it widens the launcher's
  // binding: widened_threads()). MPI must be active.
  explicit MpiCommunicator(MPI_Comm comm, const CommunicationOptions& options = {});
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return "mpi"; }
  MPI_Comm comm() const { return data_; }
  const std::vector<Peer>& peers() const { return peers_; }
  // Whether all-reduces go through a segment shared by the ranks of this host (every rank on one
  // host, LOCKSTEP_MPI_HOST_SHARED not 0) rather than through MPI.
  bool uses_host_shared_memory() const { return host_shared_ != nullptr; }
  // True after a timeout or transport error: every later collective throws the same error.
  bool broken() const { return broken_; }
  // Threads of this process whose affinity the constructor widened from the launcher's binding of
  // this rank to the CPUs of all the job's ranks on this host (rank_affinity.h); 0 when the
  // launcher bound no rank of the host more narrowly than the others or LOCKSTEP_RANK_AFFINITY is
  // "launcher".
  int widened_threads() const { return widened_threads_; }

 protected:
  // bfloat16 reductions widen to float32, reduce with MPI_FLOAT and round once (MPI has no bf16
  // type); MEAN is MPI_SUM followed by a local division.
  void do_all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override;
  void do_reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                         ReduceOp op) override;
  void do_all_gather(const void* send, void* recv, size_t count_per_rank, DType dtype) override;
  void do_broadcast(void* buf, size_t count, DType dtype, int root) override;
  void do_barrier() override;
  // bfloat16 on the wire: a 2-byte MPI datatype and a user-defined commutative sum that adds in
  // float32 and rounds each partial sum to bfloat16 (round to nearest even).
  void do_all_reduce_compressed(bfloat16* buf, size_t count) override;

 private:
  void check_usable() const;
  // Polls `request` (a collective moving about `bytes` per rank) until done, failing at the
  // deadline.
  void wait(MPI_Request* request, size_t bytes);
  void all_reduce_in_packs(void* buf, size_t count, size_t element_size, MPI_Datatype type,
                           MPI_Op op);
  [[noreturn]] void fail(const std::string& cause);
  std::string describe_lost(const std::vector<char>& answered) const;
  size_t pack_elements(size_t element_size) const;

  MPI_Comm data_ = MPI_COMM_NULL;
  MPI_Comm control_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::vector<Peer> peers_;
  std::vector<float> widened_send_, widened_recv_;  // bfloat16 scratch, reused
  std::unique_ptr<detail::QueryResponder> responder_;
  // All-reduce through a futex-waited shared segment when every rank is on this host (and
  // LOCKSTEP_MPI_HOST_SHARED is not 0); null otherwise.
  std::unique_ptr<detail::HostSharedReducer> host_shared_;
  int widened_threads_ = 0;
  bool broken_ = false;
  bool error_is_deadline_ = false;
  std::string error_;
};

}  // namespace lockstep::distribute
