#include "lockstep/distribute/strategy.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "../collectives/reduce_kernels.h"
#include "distribute/step/task_pool.h"
#include "lockstep/autodiff/functions.h"
#include "lockstep/core/cpu_cores.h"
#include "lockstep/core/denormals.h"
#include "lockstep/distribute/shared_memory_group.h"
#include "lockstep/ops/reduce.h"
#include "lockstep/ops/shape_ops.h"
#include "replica_threads.h"

namespace lockstep::distribute {

namespace {
thread_local Strategy* current_strategy = nullptr;
}  // namespace

Strategy::Strategy(StrategyConfig config) : config_(std::move(config)) {
  if (config_.replica_cores.empty()) {
    throw InvalidArgument("Strategy '" + config_.name + "': needs at least one local replica.");
  }
  if (config_.run_inline && config_.replica_cores.size() != 1) {
    throw InvalidArgument("Strategy '" + config_.name +
                          "': only a single replica can run inline on the host thread.");
  }
  if (config_.device_names.empty()) {
    for (size_t r = 0; r < config_.replica_cores.size(); ++r)
      config_.device_names.push_back("/job:localhost/replica:0/task:0/device:cpu:" +
                                     std::to_string(r));
  }
  if (config_.num_threads < 0) {
    throw InvalidArgument("Strategy '" + config_.name +
                          "': expected num_threads >= 0 (0: one per core). Received: " +
                          std::to_string(config_.num_threads) + ".");
  }
  num_threads_ = config_.num_threads > 0 ? config_.num_threads : default_num_threads();
  if (config_.run_inline) num_threads_ = 1;
  if (!config_.run_inline) {
    std::vector<std::vector<int>> cores = config_.replica_cores;
    if (!config_.pin_threads)
      for (auto& c : cores) c.clear();
    replica_threads_ = std::make_unique<ReplicaThreads>(cores);
  }
  ensure_group();
}

Strategy::~Strategy() = default;

int Strategy::default_num_threads() const {
  if (const char* env = std::getenv("LOCKSTEP_NUM_THREADS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (end == env || *end != '\0' || v < 1 || v > 4096) {
      throw InvalidArgument("LOCKSTEP_NUM_THREADS must be a whole number >= 1, got \"" +
                            std::string(env) + "\".");
    }
    return static_cast<int>(v);
  }
  std::set<int> cores;
  for (const auto& c : config_.replica_cores) cores.insert(c.begin(), c.end());
  int usable = static_cast<int>(cores.size());
  if (usable == 0) usable = available_core_count();
  return std::max(1, std::min(usable, num_local_replicas()));
}

TaskPool& Strategy::task_pool() {
  if (!tasks_) {
    TaskPoolOptions o;
    o.num_threads = num_threads_;
    // One thread for every core: on a busy machine one more gets the job a larger share of the
    // cores (TaskPoolOptions::busy_extra_threads). Pinned threads keep to their cores. Not for a
    // worker that shares its host with others of the job: their step waits for every rank, and
    // the extra can only back up this rank's own tasks, so beside a co-runner it added switches
    // and no share (docs/performance.md, "Measured design choices").
    if (!config_.pin_threads && !config_.shares_host_with_workers &&
        num_threads_ >= available_core_count()) {
      o.busy_extra_threads = 1;
    }
    // The same reason: beside other ranks of the job the caller's duplicate runs slow them.
    o.eager_caller_backups = !config_.shares_host_with_workers;
    if (config_.pin_threads) {
      // Thread 0 is the caller (never pinned); helper t takes replica t's cores.
      o.pin_cores.resize(static_cast<size_t>(num_threads_));
      for (int t = 1; t < num_threads_ && t < num_local_replicas(); ++t)
        o.pin_cores[static_cast<size_t>(t)] = config_.replica_cores[static_cast<size_t>(t)];
    }
    tasks_ = std::make_unique<TaskPool>(o);
  }
  return *tasks_;
}

int Strategy::num_workers() const {
  return config_.cross_worker ? config_.cross_worker->size() : 1;
}
int Strategy::worker_index() const {
  return config_.cross_worker ? config_.cross_worker->rank() : 0;
}

void Strategy::ensure_group() {
  // A group broken by a failed replica cannot be reused (collectives would throw forever).
  if (!group_ || group_->broken()) {
    group_ = std::make_unique<SharedMemoryGroup>(num_local_replicas(), config_.communication);
  }
}

void Strategy::run_on_replicas(const std::function<void(ReplicaContext&)>& fn) {
  ensure_group();
  Communicator* cross = config_.cross_worker.get();
  auto body = [&](int r) {
    auto comm = group_->communicator(r);
    ReplicaContext ctx(*this, r, comm.get(), cross);
    ReplicaContextScope guard(&ctx);
    ScopedFlushDenormal flush;
    // Variables created while a replica runs belong to this strategy too.
    Scope scope(*this);
    fn(ctx);
  };
  if (config_.run_inline) {
    body(0);
    return;
  }
  SharedMemoryGroup* group = group_.get();
  replica_threads_->run(body, [group](const std::string& reason) { group->abort(reason); });
}

Tensor Strategy::reduce(ReduceOp op, const PerReplica<Tensor>& value, std::optional<int> axis) {
  if (value.size() != num_local_replicas()) {
    throw InvalidArgument("Strategy::reduce: expected one value per local replica (" +
                          std::to_string(num_local_replicas()) + "). Received " +
                          std::to_string(value.size()) + ".");
  }
  // Each replica's value in float64, reduced along the axis first (as a sum or max) with the
  // ops layer's reduction, remembering how many entries it had.
  const ReduceOp fold_op = op == ReduceOp::MAX ? ReduceOp::MAX : ReduceOp::SUM;
  std::vector<Tensor> parts;
  double count = 0;
  for (int r = 0; r < value.size(); ++r) {
    Tensor v = value[r].dtype() == DType::float64 ? value[r] : value[r].to(DType::float64);
    if (axis) {
      const int a = v.shape().normalize_axis(*axis);
      const int64_t len = v.dim(a);
      count += static_cast<double>(len);
      if (op == ReduceOp::MAX && len == 0) continue;
      v = op == ReduceOp::MAX ? ops::reduce_max_forward(v, {a}) : ops::reduce_sum_forward(v, {a});
    } else {
      count += 1;
    }
    if (!parts.empty() && !(v.shape() == parts[0].shape())) {
      throw InvalidArgument(
          "Strategy::reduce: replica values differ in shape: " + parts[0].shape().to_string() +
          " (replica 0) and " + v.shape().to_string() + " (replica " + std::to_string(r) + ").");
    }
    parts.push_back(v);
  }
  // The replicas' values folded in replica order by the collectives' reduction.
  std::vector<double> acc(parts.empty() ? 0 : static_cast<size_t>(parts[0].num_elements()));
  const Shape out_shape = parts.empty() ? Shape() : parts[0].shape();
  if (!parts.empty()) {
    std::vector<const void*> srcs;
    for (const Tensor& p : parts) srcs.push_back(p.raw_data());
    void* dst = acc.data();
    detail::reduce_fold(DType::float64, fold_op, srcs.data(), static_cast<int>(srcs.size()), &dst,
                        1, acc.size(), 1);
  }
  if (num_workers() > 1) {
    ReduceOp inner = op == ReduceOp::MEAN ? ReduceOp::SUM : op;
    config_.cross_worker->all_reduce(acc.data(), acc.size(), DType::float64, inner);
    count = config_.cross_worker->all_reduce_value(count, ReduceOp::SUM);
  }
  if (op == ReduceOp::MEAN)
    for (double& x : acc) x /= count;
  DType out_dtype = value[0].dtype() == DType::float64 ? DType::float64 : DType::float32;
  Tensor out = Tensor::from_vector<double>(acc, out_shape);
  return out_dtype == DType::float64 ? out : out.to(out_dtype);
}

void Strategy::all_reduce_across_workers(std::span<double> values, ReduceOp op) {
  if (num_workers() > 1) config_.cross_worker->all_reduce(values, op);
}

Tensor Strategy::gather(const PerReplica<Tensor>& value, int axis) {
  if (num_workers() > 1) {
    throw FailedPrecondition(
        "Strategy::gather from the host is only supported within one worker; use "
        "ReplicaContext::all_gather inside run() for multi-worker gathers.");
  }
  const Tensor& first = value[0];
  const int a = first.shape().normalize_axis(axis);
  for (const Tensor& v : value.values) {
    if (v.rank() != first.rank() || v.dtype() != first.dtype() ||
        !(v.shape().with_dim(a, 0) == first.shape().with_dim(a, 0))) {
      throw InvalidArgument("Strategy::gather: replica values " + first.describe() + " and " +
                            v.describe() + " cannot be concatenated along axis " +
                            std::to_string(axis) + ".");
    }
  }
  return ops::concat_forward(value.values, a);
}

const void* Strategy::on_variable_created(const std::string&) {
  return this;
}

Strategy::Scope::Scope(Strategy& strategy) : previous_(current_strategy) {
  if (previous_ && previous_ != &strategy) {
    throw FailedPrecondition("Cannot enter the scope of strategy '" + strategy.name() +
                             "' inside the scope of a different strategy '" + previous_->name() +
                             "'. Mixing strategies is not supported: close the first scope.");
  }
  current_strategy = &strategy;
  variables_ = std::make_unique<VariableCreationScope>(&strategy);
}

Strategy::Scope::~Scope() {
  current_strategy = previous_;
}

Strategy& default_strategy() {
  static Strategy* s = new Strategy(StrategyConfig{.name = "DefaultStrategy", .run_inline = true});
  return *s;
}

Strategy& get_strategy() {
  return current_strategy ? *current_strategy : default_strategy();
}
bool has_strategy() {
  return current_strategy != nullptr && current_strategy != &default_strategy();
}

Tensor compute_average_loss(const Tensor& per_example_loss, int64_t global_batch_size) {
  if (global_batch_size < 0) {
    throw InvalidArgument("compute_average_loss: global_batch_size must be >= 0. Received " +
                          std::to_string(global_batch_size) + ".");
  }
  if (global_batch_size == 0) {
    ReplicaContext* ctx = get_replica_context();
    int64_t batch = per_example_loss.rank() ? per_example_loss.dim(0) : 1;
    global_batch_size = batch * (ctx ? ctx->num_replicas_in_sync() : 1);
  }
  Tensor scale =
      Tensor::scalar(1.0 / static_cast<double>(global_batch_size), per_example_loss.dtype());
  return mul(reduce_sum(per_example_loss), scale);
}

}  // namespace lockstep::distribute
