// fit / evaluate / predict / train_on_batch: the host loop and the per-replica steps.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "compiled.h"
#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/distribute/distributed_dataset.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/keras/callbacks.h"
#include "lockstep/keras/model.h"

namespace lockstep::keras {

using distribute::PerReplica;
using distribute::ReplicaContext;

struct Trainer {
  Model& model;
  Model::Compiled& c;
  distribute::Strategy& strategy;

  Trainer(Model& m) : model(m), c(*m.compiled_), strategy(*m.strategy_) {}

  static Tensor as_model_input(const Model& m, const Tensor& x) {
    DType want = m.input_dtype();
    return is_floating(x.dtype()) || !is_floating(want) ? x : x.to(want);
  }
  Tensor as_model_input(const Tensor& x) const { return as_model_input(model, x); }

  // Builds the model (on a one-row slice of the first batch) and the training state.
  void prepare(const Element& first_batch) {
    if (!model.built()) {
      auto scope = strategy.scope();
      model(as_model_input(first_batch[0].slice(0, std::min<int64_t>(1, first_batch[0].dim(0)))));
    }
    if (c.sync) return;
    c.trainable = model.trainable_weights();
    for (const Variable& v : model.weights()) {
      if (v.owner() && v.owner() != &strategy) {
        throw FailedPrecondition(
            "Model '" + model.name() + "': weight '" + v.name() +
            "' was created under a different distribution strategy than the one the model runs "
            "on ('" +
            strategy.name() + "'). Create the model and its weights inside one scope.");
      }
    }
    std::vector<Shape> shapes;
    for (const Variable& v : c.trainable) {
      if (v.dtype() != DType::float32) {
        throw InvalidArgument("fit: trainable weight '" + v.name() + "' is " +
                              v.raw_value().describe() + "; weights must be float32.");
      }
      shapes.push_back(v.shape());
    }
    int n = strategy.num_local_replicas();
    // CommunicationOptions::bytes_per_pack also sizes the cross-worker gradient buckets, and
    // gradient_dtype is the dtype they cross workers in.
    const distribute::CommunicationOptions& comm = strategy.communication_options();
    c.sync = std::make_unique<distribute::GradientSynchronizer>(
        shapes, n, comm.bytes_per_pack ? comm.bytes_per_pack : size_t{25} << 20,
        comm.gradient_dtype);
    c.optimizer->build(c.trainable);
    // The fused sum-and-update hands the optimizer the sum piece by piece, which only works for
    // an elementwise update: clipnorm and global_clipnorm need the norm of a whole gradient.
    nlohmann::json cfg = c.optimizer->get_config();
    c.fused_update = cfg.value("clipnorm", nlohmann::json()).is_null() &&
                     cfg.value("global_clipnorm", nlohmann::json()).is_null();
    c.replica_metrics.clear();
    for (int r = 0; r < n; ++r) {
      std::vector<std::unique_ptr<metrics::Metric>> ms;
      for (const auto& m : c.metrics) ms.push_back(m->clone());
      c.replica_metrics.push_back(std::move(ms));
    }
    c.accumulated_steps.assign(static_cast<size_t>(n), 0);
    c.loss_sum.assign(static_cast<size_t>(n), 0.0);
    c.example_count.assign(static_cast<size_t>(n), 0.0);
  }

  void reset_state() {
    std::fill(c.loss_sum.begin(), c.loss_sum.end(), 0.0);
    std::fill(c.example_count.begin(), c.example_count.end(), 0.0);
    for (auto& ms : c.replica_metrics)
      for (auto& m : ms) m->reset_state();
  }

  // Sync-on-read: merges the replicas' loss sums and metric states. With several workers the
  // merged [loss sum, example count, metric states...] are SUM-all-reduced across workers in one
  // small collective, so every worker reports the global numbers (as MultiWorkerMirroredStrategy
  // does). That collective runs at every logs() call on every worker: fit and evaluate call it
  // after each dispatch and at the end, at the same steps everywhere since every worker runs the
  // same number of steps.
  callbacks::Logs logs() const {
    std::vector<std::unique_ptr<metrics::Metric>> merged;
    std::vector<double> global(2, 0.0);
    for (size_t r = 0; r < c.loss_sum.size(); ++r)
      global[0] += c.loss_sum[r], global[1] += c.example_count[r];
    for (size_t i = 0; i < c.metrics.size(); ++i) {
      merged.push_back(c.metrics[i]->clone());
      for (const auto& ms : c.replica_metrics) merged.back()->merge_state(*ms[i]);
    }
    if (strategy.num_workers() > 1) {
      for (const auto& m : merged) {
        std::vector<double> st = m->state();
        global.insert(global.end(), st.begin(), st.end());
      }
      strategy.all_reduce_across_workers(global, distribute::ReduceOp::SUM);
      size_t at = 2;
      for (const auto& m : merged) {
        size_t n = m->state().size();
        m->set_state({global.begin() + static_cast<ptrdiff_t>(at),
                      global.begin() + static_cast<ptrdiff_t>(at + n)});
        at += n;
      }
    }
    callbacks::Logs out;
    out["loss"] = global[1] > 0 ? global[0] / global[1] : 0.0;
    for (const auto& m : merged) out[m->name()] = m->result();
    return out;
  }

  static double sum_of(const Tensor& per_example) {
    Tensor f = per_example.dtype() == DType::float32 ? per_example : per_example.to(DType::float32);
    const float* d = f.data<float>();
    double s = 0;
    for (int64_t i = 0; i < f.num_elements(); ++i) s += d[i];
    return s;
  }

  void check_element(const Element& e) const {
    if (e.size() < 2) {
      throw InvalidArgument("fit/evaluate: dataset elements must be (x, y) tuples. Received " +
                            describe(e) + ".");
    }
  }

  // One training step on this replica's slice of a global batch of `global_batch` examples.
  void train_step(ReplicaContext& ctx, const Element& e, int64_t global_batch) {
    int r = ctx.local_replica_id();
    const Tensor& y = e[1];
    int64_t b = e[0].dim(0);
    std::vector<Tensor> grads(c.trainable.size());
    // gradient_accumulation_steps N: N - 1 steps only add to this replica's accumulator (no
    // communication, DDP's no_sync); the N-th sums and updates with the average of the N.
    const int accumulation = c.optimizer->gradient_accumulation_steps();
    int& accumulated = c.accumulated_steps[static_cast<size_t>(r)];
    const bool update = accumulation == 1 || accumulated + 1 == accumulation;
    if (b > 0) {
      Tensor x = as_model_input(e[0]);
      GradientTape tape;
      Tensor y_pred = model(x, /*training=*/true);
      Tensor per_example = c.loss->call(y, y_pred);
      // Dividing by N x the global batch makes the accumulated sum the average of the N steps.
      Tensor scaled = distribute::compute_average_loss(per_example, global_batch * accumulation);
      // Multi-worker: buckets of finished gradients start crossing workers while the backward
      // pass is still computing the others (GradientSynchronizer::begin_overlap).
      if (update && c.sync->begin_overlap(ctx)) {
        tape.set_gradient_ready_callback(
            [&](size_t i, const Tensor& g) { c.sync->gradient_ready(ctx, i, g); });
      }
      // Straight into this replica's slice of the all-reduce buffer: no pack copy.
      grads = tape.gradient(scaled, c.trainable, c.sync->gradient_buffers(r));
      c.loss_sum[static_cast<size_t>(r)] += sum_of(per_example);
      c.example_count[static_cast<size_t>(r)] += static_cast<double>(b);
      for (auto& m : c.replica_metrics[static_cast<size_t>(r)]) m->update_state(y, y_pred);
    }
    if (!update) {
      c.sync->accumulate(ctx, grads);
      ++accumulated;
      return;
    }
    accumulated = 0;
    bool complete = std::all_of(grads.begin(), grads.end(), [](const Tensor& g) {
      return g.defined() && g.dtype() == DType::float32;
    });
    if (ctx.num_replicas_in_sync() == 1 && complete && accumulation == 1) {
      // A lone replica's gradients are already the sum: skip packing them into the shared buffer
      // (two copies of every gradient per step, ~10% of a seed-model step on one core).
      c.optimizer->apply_gradients_range(grads, c.trainable, 0, c.sync->total_elements());
      c.optimizer->finish_step();
      return;
    }
    if (c.fused_update) {
      c.sync->reduce_and_apply(ctx, grads,
                               [this](const std::vector<Tensor>& summed, int64_t lo, int64_t hi) {
                                 c.optimizer->apply_gradients_range(summed, c.trainable, lo, hi);
                               });
      // reduce_and_apply ends with a barrier; the next step's begins with one before any
      // replica reads iterations again.
      if (r == 0) c.optimizer->finish_step();
      return;
    }
    const std::vector<Tensor>& summed = c.sync->all_reduce(ctx, grads);
    distribute::BlockRange mine = c.sync->owned_range(r);
    c.optimizer->apply_gradients_range(summed, c.trainable, static_cast<int64_t>(mine.begin),
                                       static_cast<int64_t>(mine.end));
    // Every slice must be updated before any replica reads the weights again.
    ctx.local_communicator().barrier();
    if (r == 0) c.optimizer->finish_step();
  }

  void test_step(ReplicaContext& ctx, const Element& e) {
    int r = ctx.local_replica_id();
    int64_t b = e[0].dim(0);
    if (b == 0) return;
    Tensor y_pred = model(as_model_input(e[0]), /*training=*/false);
    Tensor per_example = c.loss->call(e[1], y_pred);
    c.loss_sum[static_cast<size_t>(r)] += sum_of(per_example);
    c.example_count[static_cast<size_t>(r)] += static_cast<double>(b);
    for (auto& m : c.replica_metrics[static_cast<size_t>(r)]) m->update_state(e[1], y_pred);
  }

  // Runs up to `k` train steps per dispatch from `it`; returns the number run (0 at the end).
  int64_t run_train(distribute::DistributedDataset::Iterator& it, int64_t k) {
    if (it.fetches_on_replicas() && c.sync) {
      // Per-replica pipelines that never end: each replica pulls its own batches on its own
      // thread. As tf.distribute does for per-replica input, the global batch is taken as this
      // replica's batch times the replicas in sync (exact when all batches are full).
      strategy.run_on_replicas([&](ReplicaContext& ctx) {
        const int r = ctx.local_replica_id();
        for (int64_t s = 0; s < k; ++s) {
          Element e = it.next_on_replica(r);
          check_element(e);
          const int64_t b = e[0].rank() ? e[0].dim(0) : 1;
          train_step(ctx, e, b * ctx.num_replicas_in_sync());
        }
      });
      return k;
    }
    std::vector<PerReplica<Element>> inputs;
    std::vector<int64_t> global;
    for (int64_t s = 0; s < k; ++s) {
      auto next = it.next();
      if (!next) break;
      check_element((*next)[0]);
      inputs.push_back(std::move(*next));
      global.push_back(it.last_global_batch_size());
    }
    if (inputs.empty()) return 0;
    prepare(inputs[0][0]);
    strategy.run_on_replicas([&](ReplicaContext& ctx) {
      for (size_t s = 0; s < inputs.size(); ++s)
        train_step(ctx, inputs[s][ctx.local_replica_id()], global[s]);
    });
    return static_cast<int64_t>(inputs.size());
  }
};

namespace {
callbacks::TrainingTarget training_target(Model& m) {
  callbacks::TrainingTarget t;
  t.stop_training = [&m] { m.stop_training = true; };
  t.optimizer = [&m]() -> optimizers::Optimizer& { return m.optimizer(); };
  t.weights = [&m] { return m.weights(); };
  t.save_weights = [&m](const std::string& path) { m.save_weights(path); };
  return t;
}

Dataset dataset_from_arrays(const Tensor& x, const Tensor& y, int64_t batch_size, bool shuffle,
                            uint64_t seed) {
  if (x.rank() == 0 || y.rank() == 0 || x.dim(0) != y.dim(0)) {
    throw InvalidArgument(
        "x and y must have the same number of examples (leading dimension). "
        "Received: x=" +
        x.describe() + ", y=" + y.describe() + ".");
  }
  if (batch_size <= 0) {
    throw InvalidArgument(
        "batch_size must be positive. Received: batch_size=" + std::to_string(batch_size) + ".");
  }
  Dataset ds = Dataset::from_tensor_slices({x, y});
  if (shuffle) ds = ds.shuffle(x.dim(0), seed, /*reshuffle_each_iteration=*/true);
  return ds.batch(batch_size);
}
}  // namespace

callbacks::History Model::fit(const Tensor& x, const Tensor& y, FitOptions options) {
  Dataset ds = dataset_from_arrays(x, y, options.batch_size, options.shuffle, options.shuffle_seed);
  return fit(ds, options);
}

callbacks::History Model::fit(const Dataset& dataset, FitOptions options) {
  if (!compiled_) throw FailedPrecondition("Model '" + name() + "' must be compiled before fit().");
  return fit(strategy_->experimental_distribute_dataset(dataset), options);
}

callbacks::History Model::fit(const distribute::DistributedDataset& dist, FitOptions options) {
  if (!compiled_) throw FailedPrecondition("Model '" + name() + "' must be compiled before fit().");
  if (options.epochs < 0 || options.initial_epoch < 0 || options.steps_per_epoch < 0) {
    throw InvalidArgument("fit: epochs, initial_epoch and steps_per_epoch must be >= 0.");
  }
  if (options.steps_per_epoch == 0 && dist.cardinality() == Dataset::kInfinite) {
    throw InvalidArgument(
        "fit: the dataset is infinite (repeat()), so steps_per_epoch must be given.");
  }
  if (dist.num_local_replicas() != strategy_->num_local_replicas()) {
    throw InvalidArgument("fit: the distributed dataset feeds " +
                          std::to_string(dist.num_local_replicas()) +
                          " local replicas, but model '" + name() + "' runs on " +
                          std::to_string(strategy_->num_local_replicas()) +
                          ". Distribute it with the strategy the model was built under.");
  }
  Trainer t(*this);
  auto history = std::make_shared<callbacks::History>();
  callbacks::CallbackList cbs(options.callbacks);
  cbs.append(history);
  int64_t steps_hint = options.steps_per_epoch;
  if (steps_hint == 0 && dist.cardinality() >= 0) steps_hint = dist.cardinality();
  if (options.verbose > 0) {
    cbs.append(std::make_shared<callbacks::ProgbarLogger>(options.verbose));
  }
  std::optional<distribute::DistributedDataset::Iterator> it;
  int initial_epoch = options.initial_epoch;
  std::optional<IteratorState> resume_position;
  callbacks::TrainingTarget target = training_target(*this);
  target.iterator_state = [&it] { return it ? it->state() : IteratorState{}; };
  target.resume_from = [&](int epoch, const IteratorState& position) {
    initial_epoch = epoch;
    resume_position = position;
  };
  cbs.set_model(this);
  cbs.set_target(target);
  cbs.set_params({{"epochs", options.epochs}, {"steps", steps_hint}, {"verbose", options.verbose}});
  stop_training = false;
  cbs.on_train_begin({});
  if (resume_position) {
    // With steps_per_epoch the iterator spans epochs and continues where it was; otherwise each
    // epoch starts a new iteration, and restoring the old one makes the next one the one after.
    auto restored = dist.make_iterator(*resume_position);
    if (options.steps_per_epoch > 0) it.emplace(std::move(restored));
  } else if (options.steps_per_epoch > 0) {
    it.emplace(dist.make_iterator());
  }
  int64_t k = compiled_->steps_per_execution;
  for (int epoch = initial_epoch; epoch < options.epochs && !stop_training; ++epoch) {
    if (options.steps_per_epoch == 0) it.emplace(dist.make_iterator());
    if (compiled_->sync) t.reset_state();
    cbs.on_epoch_begin(epoch, {});
    int64_t step = 0;
    bool exhausted = false;
    callbacks::Logs logs;
    while (options.steps_per_epoch == 0 || step < options.steps_per_epoch) {
      int64_t want = options.steps_per_epoch ? std::min(k, options.steps_per_epoch - step) : k;
      cbs.on_train_batch_begin(step, {});
      int64_t ran = t.run_train(*it, want);
      if (ran == 0) {
        exhausted = true;
        break;
      }
      step += ran;
      logs = t.logs();
      cbs.on_train_batch_end(step - 1, logs);
      if (stop_training) break;
    }
    if (step == 0) {
      throw OutOfRange("fit: the dataset produced no batch in epoch " + std::to_string(epoch + 1) +
                       ". Check the dataset (or use repeat() with steps_per_epoch).");
    }
    if (options.validation_data) {
      EvaluateOptions eo{.steps = options.validation_steps, .verbose = 0};
      for (const auto& [key, value] : evaluate(*options.validation_data, eo))
        logs["val_" + key] = value;
    }
    cbs.on_epoch_end(epoch, logs);
    if (exhausted && options.steps_per_epoch > 0) {
      // Keras' behaviour: the input ran out before steps_per_epoch * epochs steps; stop.
      break;
    }
  }
  cbs.on_train_end({});
  return *history;
}

std::map<std::string, double> Model::evaluate(const Tensor& x, const Tensor& y,
                                              EvaluateOptions options) {
  return evaluate(dataset_from_arrays(x, y, options.batch_size, false, 0), options);
}

std::map<std::string, double> Model::evaluate(const Dataset& dataset, EvaluateOptions options) {
  if (!compiled_)
    throw FailedPrecondition("Model '" + name() + "' must be compiled before evaluate().");
  if (options.steps == 0 && dataset.cardinality() == Dataset::kInfinite) {
    throw InvalidArgument("evaluate: the dataset is infinite, so steps must be given.");
  }
  Trainer t(*this);
  auto dist = strategy_->experimental_distribute_dataset(dataset);
  auto it = dist.make_iterator();
  callbacks::CallbackList cbs(options.callbacks);
  cbs.set_model(this);
  cbs.set_target(training_target(*this));
  cbs.on_test_begin({});
  bool prepared = false;
  int64_t k = compiled_->steps_per_execution;
  for (int64_t step = 0; options.steps == 0 || step < options.steps;) {
    std::vector<PerReplica<Element>> inputs;
    for (int64_t s = 0; s < k && (options.steps == 0 || step + s < options.steps); ++s) {
      auto next = it.next();
      if (!next) break;
      t.check_element((*next)[0]);
      inputs.push_back(std::move(*next));
    }
    if (inputs.empty()) break;
    if (!prepared) {
      t.prepare(inputs[0][0]);
      t.reset_state();
      prepared = true;
    }
    strategy_->run_on_replicas([&](ReplicaContext& ctx) {
      for (auto& in : inputs) t.test_step(ctx, in[ctx.local_replica_id()]);
    });
    step += static_cast<int64_t>(inputs.size());
    cbs.on_test_batch_end(step - 1, t.logs());
  }
  if (!prepared) throw OutOfRange("evaluate: the dataset produced no batch.");
  callbacks::Logs logs = t.logs();
  cbs.on_test_end(logs);
  t.reset_state();
  return {logs.begin(), logs.end()};
}

Tensor Model::predict(const Tensor& x, int64_t batch_size) {
  if (batch_size <= 0) throw InvalidArgument("predict: batch_size must be positive.");
  return predict(Dataset::from_tensor_slices(x).batch(batch_size));
}

Tensor Model::predict(const Dataset& dataset, int64_t steps) {
  auto dist = strategy_->experimental_distribute_dataset(dataset);
  auto it = dist.make_iterator();
  std::vector<Tensor> outputs;
  for (int64_t step = 0; steps == 0 || step < steps; ++step) {
    auto next = it.next();
    if (!next) break;
    if (!built()) {
      auto scope = strategy_->scope();
      (*this)(Trainer::as_model_input(*this, (*next)[0][0]));
    }
    auto per_replica = strategy_->run(
        [&](ReplicaContext&, const Element& e) {
          return e[0].dim(0) ? call(Trainer::as_model_input(*this, e[0]), false) : Tensor();
        },
        *next);
    for (const Tensor& t : per_replica.values)
      if (t.defined()) outputs.push_back(t);
  }
  if (outputs.empty()) throw OutOfRange("predict: the dataset produced no batch.");
  // Concatenation in step and replica order is the dataset's order.
  int64_t rows = 0;
  for (const Tensor& t : outputs) rows += t.dim(0);
  Tensor out(outputs[0].shape().with_dim(0, rows), outputs[0].dtype());
  char* dst = static_cast<char*>(out.raw_data());
  for (const Tensor& t : outputs) {
    std::memcpy(dst, t.raw_data(), t.nbytes());
    dst += t.nbytes();
  }
  return out;
}

std::map<std::string, double> Model::train_on_batch(const Tensor& x, const Tensor& y) {
  if (!compiled_)
    throw FailedPrecondition("Model '" + name() + "' must be compiled before train_on_batch().");
  Trainer t(*this);
  Dataset ds = Dataset::from_tensor_slices({x, y}).batch(x.dim(0));
  auto dist = strategy_->experimental_distribute_dataset(ds);
  auto it = dist.make_iterator();
  auto first = dist.make_iterator().next();
  if (first) t.prepare((*first)[0]);
  t.reset_state();
  t.run_train(it, 1);
  callbacks::Logs logs = t.logs();
  return {logs.begin(), logs.end()};
}

}  // namespace lockstep::keras
