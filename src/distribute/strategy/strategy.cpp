#include "lockstep/distribute/strategy.h"

#include <cstring>
#include <mutex>

#include "lockstep/autodiff/functions.h"
#include "lockstep/distribute/shared_memory_group.h"
#include "replica_pool.h"

namespace lockstep::distribute {

namespace {
thread_local Strategy* current_strategy = nullptr;
thread_local ReplicaContext* current_replica_context = nullptr;

struct ContextGuard {
  explicit ContextGuard(ReplicaContext* ctx) : previous(current_replica_context) {
    current_replica_context = ctx;
  }
  ~ContextGuard() { current_replica_context = previous; }
  ReplicaContext* previous;
};

template <typename T>
void add_into(double* acc, const T* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, bfloat16>) {
      acc[i] += static_cast<float>(src[i]);
    } else {
      acc[i] += static_cast<double>(src[i]);
    }
  }
}

void accumulate(std::vector<double>& acc, const Tensor& t, ReduceOp op, bool first) {
  Tensor wide = t.dtype() == DType::float64 ? t : t.to(DType::float64);
  const double* d = wide.data<double>();
  for (size_t i = 0; i < acc.size(); ++i) {
    if (op == ReduceOp::MAX) {
      acc[i] = first ? d[i] : std::max(acc[i], d[i]);
    } else {
      acc[i] += d[i];
    }
  }
}
}  // namespace

ReplicaContext* get_replica_context() {
  return current_replica_context;
}

ReplicaContext::ReplicaContext(Strategy& strategy, int local_replica_id, Communicator& local,
                               Communicator* cross_worker)
    : strategy_(strategy),
      local_replica_id_(local_replica_id),
      local_(local),
      cross_worker_(cross_worker) {}

int ReplicaContext::replica_id_in_sync_group() const {
  return strategy_.worker_index() * strategy_.num_local_replicas() + local_replica_id_;
}
int ReplicaContext::num_replicas_in_sync() const {
  return strategy_.num_replicas_in_sync();
}

void ReplicaContext::all_reduce_in_place(ReduceOp op, const Tensor& value) {
  ReduceOp inner = op == ReduceOp::MEAN ? ReduceOp::SUM : op;
  local_.all_reduce(value, inner);
  if (cross_worker_) {
    // Hierarchical: the local sum is on every local replica; replica 0 joins the workers, then
    // shares the result with its local peers.
    if (local_replica_id_ == 0) cross_worker_->all_reduce(value, inner);
    local_.broadcast(value, 0);
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
  int n = num_replicas_in_sync();
  Shape s = value.rank() == 0 ? Shape{n} : value.shape().with_dim(0, value.dim(0) * n);
  Tensor out(s, value.dtype());
  int local_n = strategy_.num_local_replicas();
  if (!cross_worker_) {
    local_.all_gather(value, out);
    return out;
  }
  // Gather locally into this worker's block, then exchange blocks between workers.
  size_t per = static_cast<size_t>(value.num_elements());
  Tensor local_block = out.reshape(Shape{n, static_cast<int64_t>(per)})
                           .slice(static_cast<int64_t>(strategy_.worker_index()) * local_n,
                                  static_cast<int64_t>(strategy_.worker_index() + 1) * local_n);
  local_.all_gather(value, local_block);
  if (local_replica_id_ == 0) {
    cross_worker_->all_gather(local_block.raw_data(), out.raw_data(), per * local_n, value.dtype());
  }
  local_.broadcast(out, 0);
  return out;
}

void ReplicaContext::barrier() {
  local_.barrier();
  if (cross_worker_) {
    if (local_replica_id_ == 0) cross_worker_->barrier();
    local_.barrier();
  }
}

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
  if (!config_.run_inline) pool_ = std::make_unique<ReplicaPool>(config_.replica_cores);
  ensure_group();
}

Strategy::~Strategy() = default;

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
    ReplicaContext ctx(*this, r, *comm, cross);
    ContextGuard guard(&ctx);
    // Variables created while a replica runs belong to this strategy too.
    Scope scope(*this);
    fn(ctx);
  };
  if (config_.run_inline) {
    body(0);
    return;
  }
  SharedMemoryGroup* group = group_.get();
  pool_->run(body, [group](const std::string& reason) { group->abort(reason); });
}

Tensor Strategy::reduce(ReduceOp op, const PerReplica<Tensor>& value, std::optional<int> axis) {
  if (value.size() != num_local_replicas()) {
    throw InvalidArgument("Strategy::reduce: expected one value per local replica (" +
                          std::to_string(num_local_replicas()) + "). Received " +
                          std::to_string(value.size()) + ".");
  }
  std::vector<double> acc;
  Shape out_shape;
  double count = 0;
  for (int r = 0; r < value.size(); ++r) {
    Tensor v = value[r];
    if (axis) {
      // Reduce along the axis first (as a sum or max), remembering how many entries it had.
      int a = v.shape().normalize_axis(*axis);
      Shape rs = v.shape().without(a);
      int64_t outer = 1, len = v.dim(a), inner = 1;
      for (int i = 0; i < a; ++i) outer *= v.dim(i);
      for (int i = a + 1; i < v.rank(); ++i) inner *= v.dim(i);
      Tensor wide = v.to(DType::float64);
      Tensor red = Tensor::zeros(rs, DType::float64);
      double* o = red.data<double>();
      const double* d = wide.data<double>();
      for (int64_t x = 0; x < outer; ++x)
        for (int64_t l = 0; l < len; ++l)
          for (int64_t y = 0; y < inner; ++y) {
            double& dst = o[x * inner + y];
            double src = d[(x * len + l) * inner + y];
            dst = (op == ReduceOp::MAX && l > 0) ? std::max(dst, src)
                  : (op == ReduceOp::MAX)        ? src
                                                 : dst + src;
          }
      count += static_cast<double>(len);
      if (op == ReduceOp::MAX && len == 0) continue;
      v = red;
    } else {
      count += 1;
    }
    if (r == 0 || acc.empty()) {
      out_shape = v.shape();
      bool first = acc.empty();
      if (first) acc.assign(static_cast<size_t>(v.num_elements()), 0.0);
      accumulate(acc, v, op, first);
    } else {
      if (!(v.shape() == out_shape)) {
        throw InvalidArgument(
            "Strategy::reduce: replica values differ in shape: " + out_shape.to_string() +
            " (replica 0) and " + v.shape().to_string() + " (replica " + std::to_string(r) + ").");
      }
      accumulate(acc, v, op, false);
    }
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
  int a = first.shape().normalize_axis(axis);
  int64_t total = 0, outer = 1, inner = 1;
  for (int i = 0; i < a; ++i) outer *= first.dim(i);
  for (int i = a + 1; i < first.rank(); ++i) inner *= first.dim(i);
  for (const Tensor& v : value.values) {
    if (v.rank() != first.rank() || v.dtype() != first.dtype() ||
        !(v.shape().with_dim(a, 0) == first.shape().with_dim(a, 0))) {
      throw InvalidArgument("Strategy::gather: replica values " + first.describe() + " and " +
                            v.describe() + " cannot be concatenated along axis " +
                            std::to_string(axis) + ".");
    }
    total += v.dim(a);
  }
  Tensor out(first.shape().with_dim(a, total), first.dtype());
  size_t es = dtype_size(first.dtype());
  char* o = static_cast<char*>(out.raw_data());
  for (int64_t x = 0; x < outer; ++x) {
    for (const Tensor& v : value.values) {
      size_t bytes = static_cast<size_t>(v.dim(a) * inner) * es;
      std::memcpy(o, static_cast<const char*>(v.raw_data()) + static_cast<size_t>(x) * bytes,
                  bytes);
      o += bytes;
    }
  }
  return out;
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
