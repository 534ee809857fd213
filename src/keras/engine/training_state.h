#pragma once
// Model::TrainingState: what compile() sets up (optimizer, loss, metric prototypes) and the
// training state fit / evaluate keep between steps — the trainable variables, the strategy's
// ReplicatedStep, the replicas' running loss sums and metrics (internal to the engine).
#include <memory>
#include <vector>

#include "distribute/step/replicated_step.h"
#include "lockstep/keras/model.h"

namespace lockstep::keras {

struct Model::TrainingState {
  std::shared_ptr<optimizers::Optimizer> optimizer;
  std::shared_ptr<losses::Loss> loss;
  std::vector<std::shared_ptr<metrics::Metric>> metrics;  // prototypes (config only)
  int steps_per_execution = 1;

  // Training state, created on first use for the model's strategy.
  std::vector<Variable> trainable;
  // The strategy's replicated step: replicas' forward/backward as tasks, then sum and update.
  std::unique_ptr<distribute::ReplicatedStep> step;
  // Per local replica: metric copies and the running loss sum / example count (sync-on-read:
  // merged when logs are read).
  std::vector<std::vector<std::unique_ptr<metrics::Metric>>> replica_metrics;
  std::vector<double> loss_sum, example_count;
  // Steps since the last update (Optimizer gradient_accumulation_steps).
  int accumulated_steps = 0;
};

}  // namespace lockstep::keras
