// Model::fit and Model::train_on_batch: the host's training loop (epochs, callbacks, the input
// iterator, resume) over Trainer's steps.
#include <algorithm>
#include <atomic>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>

#include "epoch_iterator.h"
#include "lockstep/core/check.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/keras/callbacks.h"
#include "lockstep/keras/model.h"
#include "lockstep/ops/cpu_kernels.h"
#include "trainer.h"

namespace lockstep::keras {
namespace {

bool computes_in_bfloat16(const Layer& layer) {
  if (layer.dtype_policy().compute_dtype() == DType::bfloat16) return true;
  if (const auto* model = dynamic_cast<const Model*>(&layer)) {
    for (const auto& inner : model->layers()) {
      if (inner && computes_in_bfloat16(*inner)) return true;
    }
  }
  return false;
}

// Once per process, as the first fit of a bfloat16 model starts: whether its bfloat16 math runs
// in bfloat16 kernels or is emulated in float32 ones on this CPU (ops/cpu_kernels.h).
void say_bfloat16_path(const Model& model) {
  static std::atomic<bool> said{false};
  if (said.load() || !computes_in_bfloat16(model) || said.exchange(true)) return;
  std::cout << ops::bfloat16_math_summary() << "\n";
}

}  // namespace

callbacks::History Model::fit(const Tensor& x, const Tensor& y, FitOptions options) {
  return fit(
      EpochIterator::from_arrays(x, y, options.batch_size, options.shuffle, options.shuffle_seed),
      options);
}

callbacks::History Model::fit(const Dataset& dataset, FitOptions options) {
  LOCKSTEP_CHECK_AS(FailedPrecondition, trainer_, "Model '", name(),
                    "' must be compiled before fit().");
  return fit(strategy_->experimental_distribute_dataset(dataset), options);
}

callbacks::History Model::fit(const distribute::DistributedDataset& dist, FitOptions options) {
  LOCKSTEP_CHECK_AS(FailedPrecondition, trainer_, "Model '", name(),
                    "' must be compiled before fit().");
  LOCKSTEP_CHECK(options.epochs >= 0 && options.initial_epoch >= 0 && options.steps_per_epoch >= 0,
                 "fit: epochs, initial_epoch and steps_per_epoch must be >= 0.");
  LOCKSTEP_CHECK(options.steps_per_epoch != 0 || dist.cardinality() != Dataset::kInfinite,
                 "fit: the dataset is infinite (repeat()), so steps_per_epoch must be given.");
  LOCKSTEP_CHECK(dist.num_local_replicas() == strategy_->num_local_replicas(),
                 "fit: the distributed dataset feeds ", dist.num_local_replicas(),
                 " local replicas, but model '", name(), "' runs on ",
                 strategy_->num_local_replicas(),
                 ". Distribute it with the strategy the model was built under.");
  Trainer& t = *trainer_;
  Trainer::Call call{t};
  auto history = std::make_shared<callbacks::History>();
  callbacks::CallbackList cbs(options.callbacks);
  cbs.append(history);
  if (options.verbose > 0) {
    say_bfloat16_path(*this);
    cbs.append(std::make_shared<callbacks::ProgbarLogger>(options.verbose));
  }
  EpochIterator epochs(dist, {.steps_per_epoch = options.steps_per_epoch,
                              .steps_per_execution = t.steps_per_execution});
  int initial_epoch = options.initial_epoch;
  std::optional<IteratorState> resume_position;
  callbacks::TrainingTarget target = callbacks::training_target(*this);
  target.iterator_state = [&epochs] {
    return epochs.has_iterator() ? epochs.iterator().state() : IteratorState{};
  };
  target.global_batch_size = [&epochs] {
    return epochs.has_iterator() ? epochs.iterator().last_global_batch_size() : int64_t{0};
  };
  target.input_sharded_by_file = [&dist] { return dist.sharded_by_file(); };
  target.resume_from = [&](int epoch, const IteratorState& position) {
    initial_epoch = epoch;
    resume_position = position;
  };
  cbs.set_model(this);
  cbs.set_target(target);
  cbs.set_params(
      {{"epochs", options.epochs}, {"steps", epochs.num_steps()}, {"verbose", options.verbose}});
  stop_training = false;
  cbs.on_train_begin({});
  if (resume_position) epochs.resume(*resume_position);
  // The running logs after every step only when a callback reads them: under several workers
  // they are a sum across workers, a collective per step. Every worker must take the same path.
  const bool batch_logs = t.any_worker(cbs.uses_train_batch_logs());
  const callbacks::Logs no_logs;
  for (int epoch = initial_epoch; epoch < options.epochs && !stop_training; ++epoch) {
    epochs.begin_epoch();
    if (t.step) t.reset_state();
    cbs.on_epoch_begin(epoch, {});
    callbacks::Logs logs;
    while (const int64_t want = epochs.steps_to_run()) {
      cbs.on_train_batch_begin(epochs.step(), {});
      epochs.advance(t.run_train(epochs.iterator(), want));
      if (epochs.exhausted()) break;
      if (batch_logs) logs = t.train_logs();
      cbs.on_train_batch_end(epochs.step() - 1, batch_logs ? logs : no_logs);
      if (stop_training) break;
    }
    const int64_t step = epochs.step();
    if (!batch_logs && step != 0) logs = t.train_logs();
    LOCKSTEP_CHECK_AS(OutOfRange, step != 0, "fit: the dataset produced no batch in epoch ",
                      epoch + 1, ". Check the dataset (or use repeat() with steps_per_epoch).");
    if (options.validation_data) {
      EvaluateOptions eo{.steps = options.validation_steps, .verbose = 0};
      for (const auto& [key, value] : evaluate(*options.validation_data, eo))
        logs["val_" + key] = value;
    }
    cbs.on_epoch_end(epoch, logs);
    if (epochs.exhausted() && options.steps_per_epoch > 0) {
      // Keras' behaviour: the input ran out before steps_per_epoch * epochs steps; stop.
      break;
    }
  }
  cbs.on_train_end({});
  return *history;
}

std::map<std::string, double> Model::train_on_batch(const Tensor& x, const Tensor& y) {
  LOCKSTEP_CHECK_AS(FailedPrecondition, trainer_, "Model '", name(),
                    "' must be compiled before train_on_batch().");
  Trainer& t = *trainer_;
  Trainer::Call call{t};
  Dataset ds = Dataset::from_tensor_slices({x, y}).batch(x.dim(0));
  auto dist = strategy_->experimental_distribute_dataset(ds);
  auto it = dist.make_iterator();
  auto first = dist.make_iterator().next();
  if (first) t.prepare((*first)[0]);
  t.reset_state();
  t.run_train(it, 1);
  callbacks::Logs logs = t.train_logs();
  return {logs.begin(), logs.end()};
}

}  // namespace lockstep::keras
