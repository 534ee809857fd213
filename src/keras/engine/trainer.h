#pragma once
// Trainer: what compile() sets up (optimizer, loss, metric prototypes) and the engine behind
// fit / evaluate / train_on_batch (internal to the keras engine), kept by the model between
// calls. It builds the model and its training state on the first batch, hands the strategy's
// ReplicatedStep each step's input and replica function (forward, loss / global batch, gradients
// on the tape) and merges the replicas' loss sums and metrics when they are read (sync-on-read).
#include <cstdint>
#include <memory>
#include <vector>

#include "distribute/step/replicated_step.h"
#include "lockstep/data/element.h"
#include "lockstep/distribute/distributed_dataset.h"
#include "lockstep/keras/callbacks/callback.h"
#include "lockstep/keras/model.h"

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
  Model* model;  // the model that owns this trainer
  distribute::Strategy& strategy;
  // What compile() was given.
  std::shared_ptr<optimizers::Optimizer> optimizer;
  std::shared_ptr<losses::Loss> loss;
  std::vector<std::shared_ptr<metrics::Metric>> metrics;  // prototypes (config only)
  int steps_per_execution = 1;

  // Training state, created on the first batch for the model's strategy.
  std::vector<Variable> trainable;
  // The strategy's replicated step: replicas' forward/backward as tasks, then sum and update.
  std::unique_ptr<distribute::ReplicatedStep> step;
  // Per local replica: metric copies and the running loss sum / example count (sync-on-read:
  // merged when logs are read).
  std::vector<std::vector<std::unique_ptr<metrics::Metric>>> replica_metrics;
  std::vector<double> loss_sum, example_count;
  // Steps since the last update (Optimizer gradient_accumulation_steps).
  int accumulated_steps = 0;
  // Training steps run so far (the profiler numbers steps with it).
  int64_t steps_run = 0;
  // The global batch size of the step Model::train_step is running (run_train sets it).
  int64_t global_batch = 0;
  // What the last Model::train_step returned: empty when the step left the logs to logs().
  callbacks::Logs step_logs;

  Trainer(Model& m, const CompileOptions& options);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // For one fit / train_on_batch call: however the call ends, the step's work is over when it
  // returns (ReplicatedStep::settle), and the model is the caller's again to change, move or
  // destroy.
  struct Call {
    Trainer& trainer;
    ~Call() {
      if (trainer.step) trainer.step->settle();
    }
  };

  Tensor as_model_input(const Tensor& x) const { return as_model_input(*model, x); }
  static Tensor as_model_input(const Model& m, const Tensor& x);
  // Builds the model (on a one-row slice of the first batch) and the training state.
  void prepare(const Element& first_batch);
  void reset_state();
  // Sync-on-read: merges the replicas' loss sums and metric states. With several workers the
  // merged [loss sum, example count, metric states...] are SUM-all-reduced across workers in one
  // small collective, so every worker reports the global numbers (as MultiWorkerMirroredStrategy
  // does). That collective runs at every logs() call on every worker: fit and evaluate call it
  // at the end, and after each dispatch when a callback reads batch logs on any worker
  // (any_worker), at the same steps everywhere since every worker runs the same number of steps.
  callbacks::Logs logs() const;
  // The logs fit reports after a step: what the model's train_step returned, else logs().
  callbacks::Logs train_logs() const { return step_logs.empty() ? logs() : step_logs; }
  // Whether `mine` holds on any worker (one small all-reduce with several workers): a choice that
  // decides which collectives follow must be the same everywhere.
  bool any_worker(bool mine) const;
  void check_element(const Element& e) const;
  // One replica's forward and backward on its slice of a global batch of `global_batch`
  // examples, into the run's private gradients and state. It writes nothing shared, so the step
  // may run it more than once.
  void replica_step(distribute::ReplicaRun& run, const Element& e, int64_t global_batch) const;
  // One training step with `fn` computing each replica's part on its element of `input`; then
  // the update (or, with gradient_accumulation_steps N, only accumulation on N - 1 steps of N),
  // and the committed runs' loss sums and metrics merged into the replicas' running state.
  void train_step(distribute::StepInput input, distribute::ReplicaFn fn);
  // Model::train_step's default: train_step on `data`, a batch of global_batch examples.
  void train_on(const PerReplica<Element>& data);
  void test_step(ReplicaContext& ctx, const Element& e);
  // Runs up to `k` train steps from `it` (Model::train_step for each batch the host fetches);
  // returns the number run (0 at the end).
  int64_t run_train(distribute::DistributedDataset::Iterator& it, int64_t k);
};

}  // namespace lockstep::keras
