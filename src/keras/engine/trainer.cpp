#include "trainer.h"
#include "lockstep/core/check.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/core/profiler.h"
#include "lockstep/core/task_cancellation.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/keras/metrics/metric.h"
#include "lockstep/keras/optimizers/optimizer.h"

namespace lockstep::keras {

namespace {
double sum_of(const Tensor& per_example) {
  Tensor f = per_example.dtype() == DType::float32 ? per_example : per_example.to(DType::float32);
  const float* d = f.data<float>();
  double s = 0;
  for (int64_t i = 0; i < f.num_elements(); ++i) s += d[i];
  return s;
}
}  // namespace

Trainer::Trainer(Model& m, const CompileOptions& options)
    : model(&m),
      strategy(*m.strategy_),
      optimizer(options.optimizer.ptr),
      loss(options.loss.ptr),
      steps_per_execution(options.steps_per_execution) {
  for (const MetricArg& metric : options.metrics) metrics.push_back(metric.ptr);
}

Tensor Trainer::as_model_input(const Model& m, const Tensor& x) {
  DType want = m.input_dtype();
  return is_floating(x.dtype()) || !is_floating(want) ? x : x.to(want);
}

void Trainer::prepare(const Element& first_batch) {
  if (!model->built()) {
    auto scope = strategy.scope();
    (*model)(as_model_input(first_batch[0].slice(0, std::min<int64_t>(1, first_batch[0].dim(0)))));
  }
  if (step) return;
  trainable = model->trainable_weights();
  for (const Variable& v : model->weights()) {
    LOCKSTEP_CHECK_AS(FailedPrecondition, !v.owner() || v.owner() == &strategy, "Model '",
                      model->name(), "': weight '", v.name(),
                      "' was created under a different distribution strategy than the one the "
                      "model runs on ('",
                      strategy.name(), "'). Create the model and its weights inside one scope.");
  }
  for (const Variable& v : trainable) {
    LOCKSTEP_CHECK(v.dtype() == DType::float32, "fit: trainable weight '", v.name(), "' is ",
                   v.raw_value().describe(), "; weights must be float32.");
  }
  optimizer->build(trainable);
  const auto* prototypes = &metrics;
  step =
      std::make_unique<distribute::ReplicatedStep>(strategy, trainable, *optimizer, [prototypes] {
        auto st = std::make_unique<TrainRunState>();
        for (const auto& m : *prototypes) st->metrics.push_back(m->clone());
        return st;
      });
  int n = strategy.num_local_replicas();
  replica_metrics.clear();
  for (int r = 0; r < n; ++r) {
    std::vector<std::unique_ptr<metrics::Metric>> ms;
    for (const auto& m : metrics) ms.push_back(m->clone());
    replica_metrics.push_back(std::move(ms));
  }
  accumulated_steps = 0;
  loss_sum.assign(static_cast<size_t>(n), 0.0);
  example_count.assign(static_cast<size_t>(n), 0.0);
}

void Trainer::reset_state() {
  std::fill(loss_sum.begin(), loss_sum.end(), 0.0);
  std::fill(example_count.begin(), example_count.end(), 0.0);
  for (auto& ms : replica_metrics)
    for (auto& m : ms) m->reset_state();
}

callbacks::Logs Trainer::logs() const {
  std::vector<std::unique_ptr<metrics::Metric>> merged;
  std::vector<double> global(2, 0.0);
  for (size_t r = 0; r < loss_sum.size(); ++r)
    global[0] += loss_sum[r], global[1] += example_count[r];
  for (size_t i = 0; i < metrics.size(); ++i) {
    merged.push_back(metrics[i]->clone());
    for (const auto& ms : replica_metrics) merged.back()->merge_state(*ms[i]);
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

bool Trainer::any_worker(bool mine) const {
  if (strategy.num_workers() <= 1) return mine;
  std::vector<double> any = {mine ? 1.0 : 0.0};
  strategy.all_reduce_across_workers(any, distribute::ReduceOp::SUM);
  return any[0] > 0;
}

void Trainer::check_element(const Element& e) const {
  LOCKSTEP_CHECK(e.size() >= 2, "fit/evaluate: dataset elements must be (x, y) tuples. Received ",
                 describe(e), ".");
}

void Trainer::replica_step(distribute::ReplicaRun& run, const Element& e,
                           int64_t global_batch) const {
  auto& st = static_cast<TrainRunState&>(*run.state());
  st.reset();
  const int64_t b = e[0].dim(0);
  if (b == 0) {
    run.set_gradients(std::vector<Tensor>(trainable.size()));
    return;
  }
  profiler::ScopedSpan forward(profiler::Phase::forward, run.replica());
  const Tensor x = as_model_input(e[0]);
  const Tensor y = e[1];
  // Dividing by N x the global batch makes the accumulated sum the average of the N steps.
  const int accumulation = optimizer->gradient_accumulation_steps();
  GradientTape tape;
  Tensor y_pred = (*model)(x, /*training=*/true);
  check_task_cancelled();
  Tensor per_example = loss->call(y, y_pred);
  Tensor scaled = distribute::compute_average_loss(per_example, global_batch * accumulation);
  forward.end();
  // Multi-worker: buckets of finished gradients start crossing workers while the backward pass
  // is still computing the others.
  if (run.overlaps_communication()) {
    tape.set_gradient_ready_callback(
        [&run](size_t i, const Tensor& g) { run.gradient_ready(i, g); });
  }
  // Straight into the run's gradient buffers: no copy.
  profiler::ScopedSpan backward(profiler::Phase::backward, run.replica());
  run.set_gradients(tape.gradient(scaled, trainable, run.gradient_buffers()));
  backward.end();
  st.loss_sum = sum_of(per_example);
  st.examples = static_cast<double>(b);
  for (auto& m : st.metrics) m->update_state(y, y_pred);
}

void Trainer::train_step(distribute::StepInput input, distribute::ReplicaFn fn) {
  const int accumulation = optimizer->gradient_accumulation_steps();
  const bool update = accumulation == 1 || accumulated_steps + 1 == accumulation;
  step->run(std::move(input), std::move(fn), update);
  accumulated_steps = update ? 0 : accumulated_steps + 1;
  for (int r = 0; r < strategy.num_local_replicas(); ++r) {
    const auto& st = static_cast<const TrainRunState&>(*step->committed_state(r));
    const size_t i = static_cast<size_t>(r);
    loss_sum[i] += st.loss_sum;
    example_count[i] += st.examples;
    for (size_t m = 0; m < st.metrics.size(); ++m)
      replica_metrics[i][m]->merge_state(*st.metrics[m]);
  }
}

void Trainer::test_step(ReplicaContext& ctx, const Element& e) {
  int r = ctx.local_replica_id();
  int64_t b = e[0].dim(0);
  if (b == 0) return;
  Tensor y_pred = (*model)(as_model_input(e[0]), /*training=*/false);
  Tensor per_example = loss->call(e[1], y_pred);
  loss_sum[static_cast<size_t>(r)] += sum_of(per_example);
  example_count[static_cast<size_t>(r)] += static_cast<double>(b);
  for (auto& m : replica_metrics[static_cast<size_t>(r)]) m->update_state(e[1], y_pred);
}

int64_t Trainer::run_train(distribute::DistributedDataset::Iterator& it, int64_t k) {
  if (it.fetches_on_replicas() && step) {
    step_logs.clear();
    // Per-replica pipelines that never end: each replica pulls its own batches inside its task.
    // As tf.distribute does for per-replica input, the global batch is taken as this replica's
    // batch times the replicas in sync (exact when all batches are full).
    for (int64_t s = 0; s < k; ++s) {
      profiler::StepTrace trace(steps_run + 1);
      train_step(distribute::StepInput([&it](int r) { return it.next_on_replica(r); },
                                       [&it](int r) { return it.stage_next(r); }),
                 [this](ReplicaContext& ctx, distribute::ReplicaRun& run, const Element& e) {
                   check_element(e);
                   const int64_t b = e[0].rank() ? e[0].dim(0) : 1;
                   replica_step(run, e, b * ctx.num_replicas_in_sync());
                 });
      ++steps_run;
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
    global_batch = global[s];
    step_logs = model->train_step(inputs[s]);
    ++steps_run;
  }
  return static_cast<int64_t>(inputs.size());
}

void Trainer::train_on(const PerReplica<Element>& data) {
  train_step(distribute::StepInput(data),
             [this, global = global_batch](ReplicaContext&, distribute::ReplicaRun& run,
                                           const Element& e) { replica_step(run, e, global); });
}

}  // namespace lockstep::keras
