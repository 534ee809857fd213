#pragma once
// SharedMemoryGroup: a communicator group whose ranks are threads of one process (the replica
// threads of a strategy). Collectives exchange only pointers: after an entry barrier, rank r
// reduces its block of the buffers of every rank directly (no staging copies) and writes the result
// into every rank's buffer; an exit barrier keeps the buffers alive until all readers are done.
// Traffic per rank for an all-reduce of B bytes: reads B, writes B, which is what a ring moves.
//
//   SharedMemoryGroup group(num_replicas, {.timeout_seconds = 60});
//   // in replica thread r:
//   auto comm = group.communicator(r);
//   comm->all_reduce(grad, ReduceOp::SUM);
//
// Synchronisation is a generation-counting barrier on atomics that spins briefly and then sleeps
// on a futex (Linux), so oversubscribed groups (8 ranks on 2 cores) make progress without burning
// the cores that the late ranks need. There are no sleeps and no locks on the fast path.
//
// Failures: a rank that does not arrive within timeout_seconds makes the waiting ranks throw
// DeadlineExceeded naming the missing rank(s). abort() lets the owner of the replica threads (the
// strategy) break the group when one replica failed, so the others stop waiting at once instead of
// waiting for the timeout. Once broken, every call on every endpoint throws the first error.
#include <memory>
#include <string>
#include <vector>

#include "lockstep/distribute/collective.h"

namespace lockstep::distribute {

namespace detail {
struct SharedMemoryState;
}

class SharedMemoryGroup {
 public:
  // Throws InvalidArgument unless size >= 1 and timeout_seconds >= 0.
  explicit SharedMemoryGroup(int size, const CommunicationOptions& options = {});
  ~SharedMemoryGroup();
  SharedMemoryGroup(const SharedMemoryGroup&) = delete;
  SharedMemoryGroup& operator=(const SharedMemoryGroup&) = delete;

  int size() const;
  // The endpoint of `rank` (0 <= rank < size). The same endpoint is returned on every call; it
  // keeps the group's shared state alive, so it may outlive the SharedMemoryGroup object.
  std::shared_ptr<Communicator> communicator(int rank) const;

  // Breaks the group: ranks waiting in a collective, and every later call, throw
  // Unavailable("... aborted: <reason>"). Safe to call from any thread, more than once (the first
  // reason wins). Does nothing if the group is already broken.
  void abort(const std::string& reason);
  // True once the group has timed out or been aborted.
  bool broken() const;

 private:
  std::shared_ptr<detail::SharedMemoryState> state_;
  std::vector<std::shared_ptr<Communicator>> endpoints_;
};

}  // namespace lockstep::distribute
