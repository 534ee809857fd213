#pragma once
// HostSharedReducer: all-reduce between the MPI ranks of one host through a shared-memory segment,
// with futex waits (internal to MpiCommunicator).
//
// Open MPI moves data between processes of one host through shared memory too, but it can only
// be polled: a rank waiting for a peer that the scheduler took off its core either spins (taking
// the core that peer needs) or sleeps in slices and wakes late. With one co-runner process beside
// `mpirun -np 2` on 2 cores that cost most of the quiet step rate (docs/performance.md, "Measured
// design choices"). Here the last rank to arrive at a barrier wakes the others through a futex on
// the shared word, so a waiting rank gives its core away and is back within a wake-up of its peer's
// arrival.
//
// Each all-reduce moves packs of at most slot_bytes per rank: every rank copies its pack into its
// slot, meets the others at a barrier, reduces its block of the pack (block_range) over all slots
// in rank order — the same fold on every host size, so results are bit-identical run to run — into
// its own slot and its own buffer, meets them again, and copies the other ranks' blocks out. The
// slots alternate between two sets pack by pack, so a rank that runs ahead writes into the set
// nobody reads any more. On a busy host a pack takes one barrier instead (each rank folds the whole
// pack, in the same order), and the ranks keep themselves spread over the CPUs while they wait
// (HostRankPlacement): the kernel alone packs ranks in lockstep onto one CPU beside a busy process.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "host_rank_placement.h"
#include "lockstep/core/dtype.h"
#include "lockstep/distribute/collective.h"

namespace lockstep::distribute::detail {

class HostSharedReducer {
 public:
  // Collective over `control` (every rank calls it with the same `all_on_one_host`). Returns
  // nullptr on every rank unless all ranks are on one host, `enabled` on every rank, and every
  // rank could map the segment (it is created by rank 0 and unlinked as soon as all have mapped
  // it, so nothing is left in /dev/shm, even after a crash).
  static std::unique_ptr<HostSharedReducer> create(MPI_Comm control, int rank, int size,
                                                   bool all_on_one_host, bool enabled);
  ~HostSharedReducer();
  HostSharedReducer(const HostSharedReducer&) = delete;
  HostSharedReducer& operator=(const HostSharedReducer&) = delete;

  // In-place all-reduce of `count` elements (not bfloat16: MpiCommunicator widens those first).
  // While waiting, `poll` runs about every millisecond; it answers failure diagnosis and throws at
  // the caller's deadline (which leaves this reducer unusable, as the communicator is).
  void all_reduce(void* buf, size_t count, DType dtype, ReduceOp op,
                  const std::function<void()>& poll);

  size_t slot_bytes() const { return slot_bytes_; }

  // How many barriers a pack takes. Two (each rank reduces its block, then copies the others'
  // blocks out) is the faster on a quiet host; one (each rank folds the whole pack) waits half as
  // often for a descheduled peer on a busy one. Rank 0 chooses per pack — one for two ranks on a
  // busy host, else two — unless LOCKSTEP_MPI_HOST_SHARED_BARRIERS (1 or 2: for diagnosis and
  // tests) fixes it; the bits are the same either way.
  enum class Barriers { automatic, one, two };
  // Throws InvalidArgument for a value other than 1, 2 or empty.
  static Barriers barriers_from_environment();

 private:
  struct Header;
  HostSharedReducer(void* base, size_t bytes, int rank, int size, size_t slot_bytes);
  std::byte* slot(int set, int rank) const;
  void barrier(const std::function<void()>& poll);
  // Whether the host has more runnable threads than CPUs, counting every rank of this job as
  // runnable: then a waiter sleeps at once (spinning takes the time a descheduled peer needs),
  // ranks move (HostRankPlacement), and packs take one barrier. Sampled every 20 ms.
  bool busy();

  void* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  Header* header_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
  size_t slot_bytes_ = 0;
  int set_ = 0;
  std::vector<const void*> srcs_;
  int cpus_ = 1;  // the machine's online CPUs
  HostRankPlacement placement_;
  Barriers barriers_ = Barriers::automatic;
  bool busy_ = true;
  int contrary_ = 0;
  std::chrono::steady_clock::time_point checked_{};
};

}  // namespace lockstep::distribute::detail
