#include "lockstep/distribute/replica_context.h"

#include "distribute/step/replica_runs.h"
#include "lockstep/distribute/strategy.h"

namespace lockstep::distribute {

namespace {
thread_local ReplicaContext* current_replica_context = nullptr;
}  // namespace

ReplicaContext* get_replica_context() {
  return current_replica_context;
}

ReplicaContextScope::ReplicaContextScope(ReplicaContext* ctx) : previous_(current_replica_context) {
  current_replica_context = ctx;
}
ReplicaContextScope::~ReplicaContextScope() {
  current_replica_context = previous_;
}

ReplicaContext::ReplicaContext(Strategy& strategy, int local_replica_id, Communicator* local,
                               Communicator* cross_worker, ReplicaRun* run)
    : strategy_(strategy),
      local_replica_id_(local_replica_id),
      local_(local),
      cross_worker_(cross_worker),
      run_(run) {}

int ReplicaContext::replica_id_in_sync_group() const {
  return strategy_.worker_index() * strategy_.num_local_replicas() + local_replica_id_;
}
int ReplicaContext::num_replicas_in_sync() const {
  return strategy_.num_replicas_in_sync();
}

Communicator& ReplicaContext::local_communicator() const {
  if (local_ == nullptr) {
    throw CollectiveInTask(
        "ReplicaContext: a collective was called from a replica function that runs as a task "
        "(replicas do not all run at once there). Run it with Strategy::run, which runs every "
        "replica at once.");
  }
  return *local_;
}

void ReplicaContext::all_reduce_in_place(ReduceOp op, const Tensor& value) {
  Communicator& local = local_communicator();
  ReduceOp inner = op == ReduceOp::MEAN ? ReduceOp::SUM : op;
  local.all_reduce(value, inner);
  if (cross_worker_) {
    // Hierarchical: the local sum is on every local replica; replica 0 joins the workers, then
    // shares the result with its local peers.
    if (local_replica_id_ == 0) cross_worker_->all_reduce(value, inner);
    local.broadcast(value, 0);
  }
  if (op == ReduceOp::MEAN) {
    double n = num_replicas_in_sync();
    if (value.dtype() == DType::float32) {
      float* d = value.data<float>();
      for (int64_t i = 0; i < value.num_elements(); ++i) d[i] = static_cast<float>(d[i] / n);
    } else if (value.dtype() == DType::float64) {
      double* d = value.data<double>();
      for (int64_t i = 0; i < value.num_elements(); ++i) d[i] /= n;
    } else {
      throw InvalidArgument("all_reduce MEAN: expected a float32 or float64 value. Received: " +
                            value.describe() + ".");
    }
  }
}

Tensor ReplicaContext::all_reduce(ReduceOp op, const Tensor& value) {
  Tensor out = value.clone();
  all_reduce_in_place(op, out);
  return out;
}

Tensor ReplicaContext::all_gather(const Tensor& value) {
  Communicator& local = local_communicator();
  int n = num_replicas_in_sync();
  Shape s = value.rank() == 0 ? Shape{n} : value.shape().with_dim(0, value.dim(0) * n);
  Tensor out(s, value.dtype());
  int local_n = strategy_.num_local_replicas();
  if (!cross_worker_) {
    local.all_gather(value, out);
    return out;
  }
  // Gather locally into this worker's block, then exchange blocks between workers.
  size_t per = static_cast<size_t>(value.num_elements());
  Tensor local_block = out.reshape(Shape{n, static_cast<int64_t>(per)})
                           .slice(static_cast<int64_t>(strategy_.worker_index()) * local_n,
                                  static_cast<int64_t>(strategy_.worker_index() + 1) * local_n);
  local.all_gather(value, local_block);
  if (local_replica_id_ == 0) {
    cross_worker_->all_gather(local_block.raw_data(), out.raw_data(), per * local_n, value.dtype());
  }
  local.broadcast(out, 0);
  return out;
}

void ReplicaContext::barrier() {
  Communicator& local = local_communicator();
  local.barrier();
  if (cross_worker_) {
    if (local_replica_id_ == 0) cross_worker_->barrier();
    local.barrier();
  }
}

void ReplicaContext::sum_after_step(const void* key, const Tensor& value,
                                    std::function<void(const Tensor&)> apply) {
  if (value.dtype() != DType::float64) {
    throw InvalidArgument("ReplicaContext::sum_after_step: expected a float64 value. Received: " +
                          value.describe() + ".");
  }
  if (run_ != nullptr) {
    run_->add_deferred_sum(key, value, std::move(apply));
    return;
  }
  Tensor total = num_replicas_in_sync() > 1 ? all_reduce(ReduceOp::SUM, value) : value;
  if (local_replica_id_ == 0) apply(total);
}

void* ReplicaContext::find_local(const void* shared) const {
  return run_->find_local(shared);
}

void ReplicaContext::add_local(const void* shared, std::shared_ptr<void> copy,
                               std::function<void()> commit) {
  run_->add_local(shared, std::move(copy), std::move(commit));
}

}  // namespace lockstep::distribute
