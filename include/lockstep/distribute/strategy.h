#pragma once
// Strategy: runs a step function on every replica in sync, reduces values across replicas and
// distributes input, as tf.distribute.Strategy. A strategy knows nothing of layers or models.
//
//   MirroredStrategy strategy;                     // one replica per available core
//   std::cout << strategy.num_replicas_in_sync();
//   {
//     auto scope = strategy.scope();               // variables created here belong to it
//     ... build model and optimizer ...
//   }
//   auto losses = strategy.run([&](ReplicaContext& ctx) { return step(ctx); });
//   Tensor total = strategy.reduce(ReduceOp::SUM, losses);
//
// Execution: a replica is a shard of the global batch, not a thread. The strategy owns a TaskPool
// (internal: src/distribute/step/task_pool.h) of num_threads() threads — by default one per usable
// core, unpinned — that runs a training step's tasks (ReplicatedStep: each replica's forward and
// backward, then the sum and update by chunks), re-running a straggler's task on an idle thread.
// run() (custom loops, whose functions may call collectives) runs every replica at once, one thread
// each (ReplicaThreads). The default strategy (get_strategy() outside any scope) has one replica
// that runs inline on the calling thread. Across workers (processes), a cross-worker communicator
// joins the local groups: reductions are hierarchical (local reduce, cross-worker all-reduce, local
// broadcast).
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "lockstep/autodiff/variable.h"
#include "lockstep/core/tensor.h"
#include "lockstep/distribute/collective.h"
#include "lockstep/distribute/per_replica.h"
#include "lockstep/distribute/replica_context.h"

namespace lockstep {
class Dataset;
}

namespace lockstep::distribute {

class ReplicaThreads;
class SharedMemoryGroup;
class TaskPool;
class DistributedDataset;
struct InputContext;
struct InputOptions;
enum class AutoShardPolicy : int;  // distributed_dataset.h

struct StrategyConfig {
  std::string name = "Strategy";
  // One entry per local replica: the OS cpu ids it runs on (empty entry: any). Threads are pinned
  // to them only with pin_threads.
  std::vector<std::vector<int>> replica_cores = {{}};
  // Threads of the task pool that runs training steps, the calling thread included. 0: one per
  // usable core of this worker (the union of replica_cores, else the process's affinity), at most
  // one per local replica; the environment variable LOCKSTEP_NUM_THREADS overrides that default.
  int num_threads = 0;
  // Pin threads to replica_cores. Off by default: a pinned thread whose core is busy with another
  // process cannot move to an idle core, and the whole step waits for it.
  bool pin_threads = false;
  // Run a single local replica inline on the calling thread (the default strategy) instead of on
  // a pinned replica thread.
  bool run_inline = false;
  // Device names for display, one per local replica ("/job:worker/task:0/device:cpu:0").
  std::vector<std::string> device_names;
  CommunicationOptions communication;
  // Multi-worker: the communicator between workers (one rank per process), or nullptr.
  std::shared_ptr<Communicator> cross_worker;
  // Other workers of the job run on this host (several MPI ranks per machine): the task pool
  // then has no busy-machine extra thread (see Strategy::task_pool).
  bool shares_host_with_workers = false;
};

class Strategy : public VariableCreationObserver {
 public:
  explicit Strategy(StrategyConfig config);
  ~Strategy() override;
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  const std::string& name() const { return config_.name; }
  int num_replicas_in_sync() const { return num_local_replicas() * num_workers(); }
  int num_local_replicas() const { return static_cast<int>(config_.replica_cores.size()); }
  int num_workers() const;
  int worker_index() const;
  const std::vector<std::string>& device_names() const { return config_.device_names; }
  const CommunicationOptions& communication_options() const { return config_.communication; }
  // The communicator between workers (one rank per process), or nullptr with one worker.
  Communicator* cross_worker() const { return config_.cross_worker.get(); }
  const std::shared_ptr<Communicator>& cross_worker_shared() const { return config_.cross_worker; }
  // Threads that run training-step tasks (see StrategyConfig::num_threads).
  int num_threads() const { return num_threads_; }
  // The pool that runs training-step tasks (created on first use). TaskPool is internal to the
  // library (src/distribute/step/task_pool.h): the step engine and in-tree tests use it.
  TaskPool& task_pool();

  // RAII scope (`with strategy.scope():`): while alive on this thread, get_strategy() returns this
  // strategy and variables created on this thread belong to it. Entering the scope of a different
  // strategy inside this one is an error (FailedPrecondition).
  class Scope {
   public:
    explicit Scope(Strategy& strategy);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Strategy* previous_;
    std::unique_ptr<VariableCreationScope> variables_;
  };
  [[nodiscard]] Scope scope() { return Scope(*this); }

  // Runs fn on every local replica concurrently and returns when all are done. fn takes the
  // ReplicaContext& and, when given, the replica's own value of each PerReplica argument.
  // Returns PerReplica<R> (or nothing when fn returns void). The first exception (lowest replica)
  // is rethrown; the others are released from any collective they wait in.
  template <typename F, typename... A>
  auto run(F&& fn, const PerReplica<A>&... args);

  // Type-erased core of run().
  void run_on_replicas(const std::function<void(ReplicaContext&)>& fn);

  // Cross-replica reductions from the host (tf.distribute.Strategy.reduce). Without `axis` the
  // per-replica values must have one shape and are combined elementwise (MEAN divides by the
  // number of replicas in sync). With `axis`, each value is also reduced along that axis and MEAN
  // divides by the total length along it, so uneven per-replica batches weigh by example.
  Tensor reduce(ReduceOp op, const PerReplica<Tensor>& value, std::optional<int> axis = {});
  // Host-side all-reduce of a few doubles over the workers (SUM or MAX; MEAN divides by the
  // number of workers); nothing happens with one worker. A collective: every worker calls it at the
  // same point of its program. Keras' logs use it to report global loss and metrics.
  void all_reduce_across_workers(std::span<double> values, ReduceOp op);
  // Concatenation along `axis` of all replicas' values (tf.distribute.Strategy.gather).
  Tensor gather(const PerReplica<Tensor>& value, int axis = 0);
  std::vector<Tensor> experimental_local_results(const PerReplica<Tensor>& value) const {
    return value.values;
  }

  // Splits each global batch of `dataset` over the replicas in sync (see distributed_dataset.h).
  DistributedDataset experimental_distribute_dataset(const Dataset& dataset);
  // Same, with how workers divide the input (AutoShardPolicy::DATA is the overload above).
  DistributedDataset experimental_distribute_dataset(const Dataset& dataset,
                                                     AutoShardPolicy policy);
  // Calls fn once per worker with its InputContext; fn's dataset yields per-replica batches.
  // With options.experimental_replication_mode PER_REPLICA, calls it once per local replica
  // instead (see distributed_dataset.h).
  DistributedDataset distribute_datasets_from_function(
      const std::function<Dataset(const InputContext&)>& fn);
  DistributedDataset distribute_datasets_from_function(
      const std::function<Dataset(const InputContext&)>& fn, const InputOptions& options);

  // VariableCreationObserver: records this strategy as the owner of variables created in scope.
  const void* on_variable_created(const std::string& name) override;

 private:
  void ensure_group();
  int default_num_threads() const;
  StrategyConfig config_;
  std::unique_ptr<ReplicaThreads> replica_threads_;
  std::unique_ptr<SharedMemoryGroup> group_;
  std::unique_ptr<TaskPool> tasks_;
  int num_threads_ = 1;
};

// The strategy whose scope is open on this thread, else the default strategy (one replica).
Strategy& get_strategy();
// True when a strategy's scope (other than the default's) is open on this thread.
bool has_strategy();
// The process's default strategy: one replica, inline on the calling thread.
Strategy& default_strategy();

// Sum of per-example losses divided by the global batch size: the per-replica loss whose
// gradients, summed over replicas, equal the gradient of the mean loss over the global batch
// (tf.nn.compute_average_loss). per_example_loss is float32 [batch] (any shape: all elements
// count). When global_batch_size is 0 it is taken as this replica's batch times replicas in sync.
Tensor compute_average_loss(const Tensor& per_example_loss, int64_t global_batch_size = 0);

// ---- implementation of the template

template <typename F, typename... A>
auto Strategy::run(F&& fn, const PerReplica<A>&... args) {
  using R = std::invoke_result_t<F&, ReplicaContext&, const A&...>;
  if constexpr (std::is_void_v<R>) {
    run_on_replicas([&](ReplicaContext& ctx) { fn(ctx, args[ctx.local_replica_id()]...); });
  } else {
    PerReplica<R> out;
    out.values.resize(static_cast<size_t>(num_local_replicas()));
    run_on_replicas([&](ReplicaContext& ctx) {
      out[ctx.local_replica_id()] = fn(ctx, args[ctx.local_replica_id()]...);
    });
    return out;
  }
}

}  // namespace lockstep::distribute
