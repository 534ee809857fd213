#pragma once
// ReplicaContext: what code running inside Strategy::run sees of its replica, as
// tf.distribute.ReplicaContext. Collectives called here must be called by every replica in sync.
#include "lockstep/core/tensor.h"
#include "lockstep/distribute/collective.h"

namespace lockstep::distribute {

class Strategy;

class ReplicaContext {
 public:
  ReplicaContext(Strategy& strategy, int local_replica_id, Communicator& local,
                 Communicator* cross_worker);

  Strategy& strategy() const { return strategy_; }
  // Index among all replicas of all workers: worker * local replicas + local id.
  int replica_id_in_sync_group() const;
  int num_replicas_in_sync() const;
  int local_replica_id() const { return local_replica_id_; }

  // Reduces `value` over every replica in sync; every replica gets the result (a new tensor).
  Tensor all_reduce(ReduceOp op, const Tensor& value);
  // In place, on float32 / float64 / bfloat16 / integer buffers (views allowed).
  void all_reduce_in_place(ReduceOp op, const Tensor& value);
  // Concatenates every replica's `value` along axis 0 in replica order (shapes must match).
  Tensor all_gather(const Tensor& value);
  void barrier();

  // The communicator between this process's replica threads (for components such as the
  // gradient synchroniser that schedule their own collectives) and, in multi-worker runs, the
  // communicator between workers (used by local replica 0 only), else nullptr.
  Communicator& local_communicator() const { return local_; }
  Communicator* cross_worker_communicator() const { return cross_worker_; }

 private:
  Strategy& strategy_;
  int local_replica_id_;
  Communicator& local_;
  Communicator* cross_worker_;
};

// The replica context of the calling thread while it runs inside Strategy::run; nullptr in the
// cross-replica (host) context.
ReplicaContext* get_replica_context();

}  // namespace lockstep::distribute
