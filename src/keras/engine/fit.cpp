// Model::fit and Model::train_on_batch: the host's training loop (epochs, callbacks, the input
// iterator, resume) over Trainer's steps.
#include <algorithm>
#include <atomic>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>

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
  Dataset ds = dataset_from_arrays(x, y, options.batch_size, options.shuffle, options.shuffle_seed);
  return fit(ds, options);
}

callbacks::History Model::fit(const Dataset& dataset, FitOptions options) {
  LOCKSTEP_CHECK_AS(FailedPrecondition, training_, "Model '", name(),
                    "' must be compiled before fit().");
  return fit(strategy_->experimental_distribute_dataset(dataset), options);
}

callbacks::History Model::fit(const distribute::DistributedDataset& dist, FitOptions options) {
  LOCKSTEP_CHECK_AS(FailedPrecondition, training_, "Model '", name(),
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
  auto history = std::make_shared<callbacks::History>();
  callbacks::CallbackList cbs(options.callbacks);
  cbs.append(history);
  int64_t steps_hint = options.steps_per_epoch;
  if (steps_hint == 0 && dist.cardinality() >= 0) steps_hint = dist.cardinality();
  if (options.verbose > 0) {
    say_bfloat16_path(*this);
    cbs.append(std::make_shared<callbacks::ProgbarLogger>(options.verbose));
  }
  std::optional<distribute::DistributedDataset::Iterator> it;
  // After the iterator: the trainer waits for lingering runs, which may use it, when destroyed.
  Trainer t(*this);
  int initial_epoch = options.initial_epoch;
  std::optional<IteratorState> resume_position;
  callbacks::TrainingTarget target = callbacks::training_target(*this);
  target.iterator_state = [&it] { return it ? it->state() : IteratorState{}; };
  target.global_batch_size = [&it] { return it ? it->last_global_batch_size() : int64_t{0}; };
  target.input_sharded_by_file = [&dist] { return dist.sharded_by_file(); };
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
  // The running logs after every step only when a callback reads them: under several workers
  // they are a sum across workers, a collective per step. Every worker must take the same path.
  const bool batch_logs = t.any_worker(cbs.uses_train_batch_logs());
  const callbacks::Logs no_logs;
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
      if (batch_logs) logs = t.logs();
      cbs.on_train_batch_end(step - 1, batch_logs ? logs : no_logs);
      if (stop_training) break;
    }
    if (!batch_logs && step != 0) logs = t.logs();
    LOCKSTEP_CHECK_AS(OutOfRange, step != 0, "fit: the dataset produced no batch in epoch ",
                      epoch + 1, ". Check the dataset (or use repeat() with steps_per_epoch).");
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

std::map<std::string, double> Model::train_on_batch(const Tensor& x, const Tensor& y) {
  LOCKSTEP_CHECK_AS(FailedPrecondition, training_, "Model '", name(),
                    "' must be compiled before train_on_batch().");
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
