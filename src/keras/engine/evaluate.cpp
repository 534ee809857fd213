// Model::evaluate: the loss and metrics over a dataset, each replica on its slice of every batch.
#include "epoch_iterator.h"
#include "lockstep/core/check.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/keras/callbacks.h"
#include "lockstep/keras/model.h"
#include "trainer.h"

namespace lockstep::keras {

std::map<std::string, double> Model::evaluate(const Tensor& x, const Tensor& y,
                                              EvaluateOptions options) {
  return evaluate(EpochIterator::from_arrays(x, y, options.batch_size, false, 0), options);
}

std::map<std::string, double> Model::evaluate(const Dataset& dataset, EvaluateOptions options) {
  LOCKSTEP_CHECK_AS(FailedPrecondition, trainer_, "Model '", name(),
                    "' must be compiled before evaluate().");
  LOCKSTEP_CHECK(options.steps != 0 || dataset.cardinality() != Dataset::kInfinite,
                 "evaluate: the dataset is infinite, so steps must be given.");
  Trainer& t = *trainer_;
  EpochIterator epoch(
      strategy_->experimental_distribute_dataset(dataset),
      {.steps_per_epoch = options.steps, .steps_per_execution = t.steps_per_execution});
  epoch.begin_epoch();
  callbacks::CallbackList cbs(options.callbacks);
  cbs.set_model(this);
  cbs.set_target(callbacks::training_target(*this));
  cbs.on_test_begin({});
  // The running logs after a step only for callbacks (fit's validation passes none): under
  // several workers they are a sum across workers, a collective per step. Every worker must take
  // the same path.
  const bool batch_logs = t.any_worker(!options.callbacks.empty());
  bool prepared = false;
  while (const int64_t want = epoch.steps_to_run()) {
    std::vector<PerReplica<Element>> inputs;
    for (int64_t s = 0; s < want; ++s) {
      auto next = epoch.iterator().next();
      if (!next) break;
      t.check_element((*next)[0]);
      inputs.push_back(std::move(*next));
    }
    epoch.advance(static_cast<int64_t>(inputs.size()));
    if (inputs.empty()) break;
    if (!prepared) {
      t.prepare(inputs[0][0]);
      t.reset_state();
      prepared = true;
    }
    strategy_->run_on_replicas([&](ReplicaContext& ctx) {
      for (auto& in : inputs) t.test_step(ctx, in[ctx.local_replica_id()]);
    });
    if (batch_logs) cbs.on_test_batch_end(epoch.step() - 1, t.logs());
  }
  LOCKSTEP_CHECK_AS(OutOfRange, prepared, "evaluate: the dataset produced no batch.");
  callbacks::Logs logs = t.logs();
  cbs.on_test_end(logs);
  t.reset_state();
  return {logs.begin(), logs.end()};
}

}  // namespace lockstep::keras
