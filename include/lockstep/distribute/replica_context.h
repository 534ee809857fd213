#pragma once
// ReplicaContext: what code running for one replica sees of it, as tf.distribute.ReplicaContext.
// Collectives called here must be called by every replica in sync.
#include <functional>
#include <memory>
#include <mutex>

#include "lockstep/core/error.h"
#include "lockstep/core/tensor.h"
#include "lockstep/distribute/collective.h"

namespace lockstep::distribute {

class Strategy;
class ReplicaRun;

// Thrown by a collective called from a replica function that the training step runs as a task
// (src/distribute/step/replicated_step.h): replicas then do not all run at once, so nothing could
// answer it. The step catches it and runs the replicas as a gang (one thread each) from then on.
class CollectiveInTask : public FailedPrecondition {
 public:
  using FailedPrecondition::FailedPrecondition;
};

class ReplicaContext {
 public:
  // `local` is the communicator between this process's replicas; nullptr when the replica runs as
  // a task (collectives then throw CollectiveInTask). `run`: the task run whose private state
  // replica_local() and sum_after_step() use, or nullptr.
  ReplicaContext(Strategy& strategy, int local_replica_id, Communicator* local,
                 Communicator* cross_worker, ReplicaRun* run = nullptr);

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

  // The communicator between this process's replica threads (for components that schedule their
  // own collectives) and, in multi-worker runs, the communicator between workers (used by local
  // replica 0 only), else nullptr.
  Communicator& local_communicator() const;
  Communicator* cross_worker_communicator() const { return cross_worker_; }

  // ---- State a step must change exactly once although its task may run twice (a backup run,
  // src/distribute/step/task_pool.h). Outside a task both act directly.
  // This run's private copy of per-replica state `shared` (a random generator), made from it on
  // first use under `mu`, and written back into `shared` (under `mu`) if this run commits.
  template <typename T>
  T& replica_local(T& shared, std::mutex& mu);
  // Sums float64 `value` over every replica in sync once the step's replica functions have all
  // finished, and calls apply(sum) once, on the thread that runs the step (the moving statistics
  // of a normalization layer). In a training step's task this is no collective: replicas with
  // an empty slice, which run nothing, contribute nothing. Elsewhere (Strategy::run) it is an
  // all-reduce right away and local replica 0 calls apply.
  void sum_after_step(const void* key, const Tensor& value,
                      std::function<void(const Tensor&)> apply);

 private:
  void* find_local(const void* shared) const;
  void add_local(const void* shared, std::shared_ptr<void> copy, std::function<void()> commit);

  Strategy& strategy_;
  int local_replica_id_;
  Communicator* local_;
  Communicator* cross_worker_;
  ReplicaRun* run_;
};

// The replica context of the calling thread while it runs a replica function; nullptr in the
// cross-replica (host) context.
ReplicaContext* get_replica_context();

// Makes `ctx` the calling thread's replica context while alive (stack discipline).
class ReplicaContextScope {
 public:
  explicit ReplicaContextScope(ReplicaContext* ctx);
  ~ReplicaContextScope();
  ReplicaContextScope(const ReplicaContextScope&) = delete;
  ReplicaContextScope& operator=(const ReplicaContextScope&) = delete;

 private:
  ReplicaContext* previous_;
};

template <typename T>
T& ReplicaContext::replica_local(T& shared, std::mutex& mu) {
  if (run_ == nullptr) return shared;
  if (void* p = find_local(&shared)) return *static_cast<T*>(p);
  std::shared_ptr<T> copy;
  {
    std::lock_guard lock(mu);
    copy = std::make_shared<T>(shared);
  }
  T* raw = copy.get();
  add_local(&shared, std::move(copy), [&shared, &mu, raw] {
    std::lock_guard lock(mu);
    shared = *raw;
  });
  return *raw;
}

}  // namespace lockstep::distribute
