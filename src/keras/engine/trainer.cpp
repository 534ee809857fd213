// fit / evaluate / predict / train_on_batch: the host loop and the per-replica steps.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/core/profiler.h"
#include "lockstep/core/task_cancellation.h"
#include "lockstep/distribute/distributed_dataset.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/keras/callbacks.h"
#include "lockstep/keras/model.h"
#include "training_state.h"

namespace lockstep::keras {

using distribute::PerReplica;
using distribute::ReplicaContext;

// What one run of a replica's training step produces besides gradients: its loss sum, example
// count and metric updates, merged into the replica's running state when the run commits.
struct TrainRunState : distribute::RunState {
  double loss_sum = 0;
  double examples = 0;
  std::vector<std::unique_ptr<metrics::Metric>> metrics;
  void reset() {
    loss_sum = 0;
    examples = 0;
    for (auto& m : metrics) m->reset_state();
  }
};

struct Trainer {
  Model& model;
  Model::TrainingState& state;
  distribute::Strategy& strategy;
  // Per-replica pipelines pulled inside the step: each replica's element of the current step,
  // pulled once whichever run of the replica's task gets there first.
  struct ReplicaInput {
    std::mutex mu;
    int64_t step = -1;
    Element element;
  };
  std::vector<std::unique_ptr<ReplicaInput>> replica_inputs;
  int64_t steps_run = 0;

  Trainer(Model& m) : model(m), state(*m.training_), strategy(*m.strategy_) {}
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;
  // A replica's run that lost to its backup may still be executing (it stops at its next
  // cancellation check); it must be gone before what it refers to (this, the iterator) is.
  ~Trainer() {
    if (state.step) state.step->wait_for_stragglers();
  }

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
    if (state.step) return;
    state.trainable = model.trainable_weights();
    for (const Variable& v : model.weights()) {
      if (v.owner() && v.owner() != &strategy) {
        throw FailedPrecondition(
            "Model '" + model.name() + "': weight '" + v.name() +
            "' was created under a different distribution strategy than the one the model runs "
            "on ('" +
            strategy.name() + "'). Create the model and its weights inside one scope.");
      }
    }
    for (const Variable& v : state.trainable) {
      if (v.dtype() != DType::float32) {
        throw InvalidArgument("fit: trainable weight '" + v.name() + "' is " +
                              v.raw_value().describe() + "; weights must be float32.");
      }
    }
    state.optimizer->build(state.trainable);
    const auto* prototypes = &state.metrics;
    state.step = std::make_unique<distribute::ReplicatedStep>(
        strategy, state.trainable, *state.optimizer, [prototypes] {
          auto st = std::make_unique<TrainRunState>();
          for (const auto& m : *prototypes) st->metrics.push_back(m->clone());
          return st;
        });
    int n = strategy.num_local_replicas();
    state.replica_metrics.clear();
    for (int r = 0; r < n; ++r) {
      std::vector<std::unique_ptr<metrics::Metric>> ms;
      for (const auto& m : state.metrics) ms.push_back(m->clone());
      state.replica_metrics.push_back(std::move(ms));
    }
    state.accumulated_steps = 0;
    state.loss_sum.assign(static_cast<size_t>(n), 0.0);
    state.example_count.assign(static_cast<size_t>(n), 0.0);
  }

  void reset_state() {
    std::fill(state.loss_sum.begin(), state.loss_sum.end(), 0.0);
    std::fill(state.example_count.begin(), state.example_count.end(), 0.0);
    for (auto& ms : state.replica_metrics)
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
    for (size_t r = 0; r < state.loss_sum.size(); ++r)
      global[0] += state.loss_sum[r], global[1] += state.example_count[r];
    for (size_t i = 0; i < state.metrics.size(); ++i) {
      merged.push_back(state.metrics[i]->clone());
      for (const auto& ms : state.replica_metrics) merged.back()->merge_state(*ms[i]);
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

  // One replica's forward and backward on its slice of a global batch of `global_batch`
  // examples, into the run's private gradients and state. Safe to run twice (a backup run): it
  // writes nothing shared.
  void replica_step(distribute::ReplicaRun& run, const Element& e, int64_t global_batch) const {
    auto& st = static_cast<TrainRunState&>(*run.state());
    st.reset();
    const int64_t b = e[0].dim(0);
    if (b == 0) {
      run.set_gradients(std::vector<Tensor>(state.trainable.size()));
      return;
    }
    profiler::ScopedSpan forward(profiler::Phase::kForward, run.replica());
    const Tensor x = as_model_input(e[0]);
    const Tensor y = e[1];
    // Dividing by N x the global batch makes the accumulated sum the average of the N steps.
    const int accumulation = state.optimizer->gradient_accumulation_steps();
    GradientTape tape;
    Tensor y_pred = model(x, /*training=*/true);
    check_task_cancelled();
    Tensor per_example = state.loss->call(y, y_pred);
    Tensor scaled = distribute::compute_average_loss(per_example, global_batch * accumulation);
    forward.end();
    // Multi-worker: buckets of finished gradients start crossing workers while the backward pass
    // is still computing the others.
    if (run.overlaps_communication()) {
      tape.set_gradient_ready_callback(
          [&run](size_t i, const Tensor& g) { run.gradient_ready(i, g); });
    }
    // Straight into the run's gradient buffers: no copy.
    profiler::ScopedSpan backward(profiler::Phase::kBackward, run.replica());
    run.set_gradients(tape.gradient(scaled, state.trainable, run.gradient_buffers()));
    backward.end();
    st.loss_sum = sum_of(per_example);
    st.examples = static_cast<double>(b);
    for (auto& m : st.metrics) m->update_state(y, y_pred);
  }

  // One training step with `fn` computing each replica's part; then the update (or, with
  // gradient_accumulation_steps N, only accumulation on N - 1 steps of N), and the committed
  // runs' loss sums and metrics merged into the replicas' running state.
  void train_step(distribute::ReplicatedStep::ReplicaFn fn) {
    const int accumulation = state.optimizer->gradient_accumulation_steps();
    const bool update = accumulation == 1 || state.accumulated_steps + 1 == accumulation;
    state.step->run(std::move(fn), update);
    state.accumulated_steps = update ? 0 : state.accumulated_steps + 1;
    for (int r = 0; r < strategy.num_local_replicas(); ++r) {
      const auto& st = static_cast<const TrainRunState&>(*state.step->committed_state(r));
      const size_t i = static_cast<size_t>(r);
      state.loss_sum[i] += st.loss_sum;
      state.example_count[i] += st.examples;
      for (size_t m = 0; m < st.metrics.size(); ++m)
        state.replica_metrics[i][m]->merge_state(*st.metrics[m]);
    }
    ++steps_run;
  }

  void test_step(ReplicaContext& ctx, const Element& e) {
    int r = ctx.local_replica_id();
    int64_t b = e[0].dim(0);
    if (b == 0) return;
    Tensor y_pred = model(as_model_input(e[0]), /*training=*/false);
    Tensor per_example = state.loss->call(e[1], y_pred);
    state.loss_sum[static_cast<size_t>(r)] += sum_of(per_example);
    state.example_count[static_cast<size_t>(r)] += static_cast<double>(b);
    for (auto& m : state.replica_metrics[static_cast<size_t>(r)]) m->update_state(e[1], y_pred);
  }

  // Runs up to `k` train steps from `it`; returns the number run (0 at the end).
  int64_t run_train(distribute::DistributedDataset::Iterator& it, int64_t k) {
    if (it.fetches_on_replicas() && state.step) {
      // Per-replica pipelines that never end: each replica pulls its own batches inside its task.
      // As tf.distribute does for per-replica input, the global batch is taken as this replica's
      // batch times the replicas in sync (exact when all batches are full).
      if (replica_inputs.empty()) {
        for (int r = 0; r < strategy.num_local_replicas(); ++r)
          replica_inputs.push_back(std::make_unique<ReplicaInput>());
      }
      for (int64_t s = 0; s < k; ++s) {
        const int64_t step = steps_run;
        profiler::StepTrace trace(step + 1);
        train_step([this, &it, step](ReplicaContext& ctx, distribute::ReplicaRun& run) {
          const int r = ctx.local_replica_id();
          ReplicaInput& in = *replica_inputs[static_cast<size_t>(r)];
          Element e;
          {
            std::lock_guard lock(in.mu);
            if (in.step != step) {
              check_task_cancelled();
              in.element = it.next_on_replica(r);
              in.step = step;
            }
            e = in.element;
          }
          check_element(e);
          const int64_t b = e[0].rank() ? e[0].dim(0) : 1;
          replica_step(run, e, b * ctx.num_replicas_in_sync());
        });
      }
      return k;
    }
    std::vector<PerReplica<Element>> inputs;
    std::vector<int64_t> global;
    // The first step's span holds the fetches of the whole dispatch (steps_per_execution).
    profiler::StepTrace trace(steps_run + 1);
    for (int64_t s = 0; s < k; ++s) {
      auto next = it.next();
      if (!next) break;
      check_element((*next)[0]);
      inputs.push_back(std::move(*next));
      global.push_back(it.last_global_batch_size());
    }
    if (inputs.empty()) {
      trace.discard();  // the end of the data, not a step
      return 0;
    }
    prepare(inputs[0][0]);
    for (size_t s = 0; s < inputs.size(); ++s) {
      if (s > 0) trace.next(steps_run + 1);
      // The batch is owned by the step's function: a run that lost to its backup may read it
      // after this dispatch is over.
      auto batch = std::make_shared<PerReplica<Element>>(std::move(inputs[s]));
      const int64_t global_batch = global[s];
      train_step([this, batch, global_batch](ReplicaContext& ctx, distribute::ReplicaRun& run) {
        replica_step(run, (*batch)[ctx.local_replica_id()], global_batch);
      });
    }
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
  if (!training_) throw FailedPrecondition("Model '" + name() + "' must be compiled before fit().");
  return fit(strategy_->experimental_distribute_dataset(dataset), options);
}

callbacks::History Model::fit(const distribute::DistributedDataset& dist, FitOptions options) {
  if (!training_) throw FailedPrecondition("Model '" + name() + "' must be compiled before fit().");
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
  auto history = std::make_shared<callbacks::History>();
  callbacks::CallbackList cbs(options.callbacks);
  cbs.append(history);
  int64_t steps_hint = options.steps_per_epoch;
  if (steps_hint == 0 && dist.cardinality() >= 0) steps_hint = dist.cardinality();
  if (options.verbose > 0) {
    cbs.append(std::make_shared<callbacks::ProgbarLogger>(options.verbose));
  }
  std::optional<distribute::DistributedDataset::Iterator> it;
  // After the iterator: the trainer waits for lingering runs, which may use it, when destroyed.
  Trainer t(*this);
  int initial_epoch = options.initial_epoch;
  std::optional<IteratorState> resume_position;
  callbacks::TrainingTarget target = training_target(*this);
  target.iterator_state = [&it] { return it ? it->state() : IteratorState{}; };
  target.global_batch_size = [&it] { return it ? it->last_global_batch_size() : int64_t{0}; };
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
  int64_t k = training_->steps_per_execution;
  for (int epoch = initial_epoch; epoch < options.epochs && !stop_training; ++epoch) {
    if (options.steps_per_epoch == 0) it.emplace(dist.make_iterator());
    if (training_->step) t.reset_state();
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
  if (!training_)
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
  int64_t k = training_->steps_per_execution;
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
  if (!training_)
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
