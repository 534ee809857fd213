#pragma once
// Callback: hooks into fit / evaluate / predict (keras.callbacks.Callback). Every hook is a no-op
// by default; a callback overrides the ones it needs:
//
//   struct PrintLoss : callbacks::Callback {
//     void on_epoch_end(int epoch, const callbacks::Logs& logs) override {
//       std::cout << epoch << ": " << logs.at("loss") << "\n";
//     }
//   };
//   model.fit(ds, {.epochs = 5, .callbacks = {std::make_shared<PrintLoss>()}});
//
// Logs hold the running values of the epoch (loss, metrics, and val_* at epoch end).
//
// What built-in callbacks touch in the model — stop_training, the optimizer, the weights,
// save_weights — goes through a TrainingTarget. set_model() binds it to a Model; a custom training
// loop (or a test) can bind it to its own flag, optimizer and variables with set_target().
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/autodiff/variable.h"
#include "lockstep/data/dataset.h"

namespace lockstep::keras {
class Model;
namespace optimizers {
class Optimizer;
}
}  // namespace lockstep::keras

namespace lockstep::keras::callbacks {

using Logs = std::map<std::string, double>;
// fit's parameters: "epochs", "steps" (per epoch; 0 when unknown), "verbose".
using Params = std::map<std::string, int64_t>;

struct TrainingTarget {
  std::function<void()> stop_training;                   // model.stop_training = true
  std::function<optimizers::Optimizer&()> optimizer;     // model.optimizer
  std::function<std::vector<Variable>()> weights;        // model.weights
  std::function<void(const std::string&)> save_weights;  // model.save_weights(path)
  // Set by fit only (BackupAndRestore): the position of fit's input iterator, and a request,
  // valid during on_train_begin, to continue at `epoch` with the input iterator at `position`.
  std::function<IteratorState()> iterator_state;
  std::function<void(int epoch, const IteratorState& position)> resume_from;
  // Set by fit only: the global batch size (examples over all replicas in sync) of the last step.
  std::function<int64_t()> global_batch_size;
  // Set by fit only: whether fit's input is sharded by file across workers
  // (distribute::DistributedDataset::sharded_by_file).
  std::function<bool()> input_sharded_by_file;
};

// The TrainingTarget of `model` (stop_training, optimizer, weights, save_weights; fit adds the
// fields it alone sets).
TrainingTarget training_target(Model& model);

class Callback {
 public:
  virtual ~Callback();

  // Binds the callback (and its TrainingTarget) to `model`; fit calls this.
  void set_model(Model* model);
  // The model set by set_model; throws FailedPrecondition when there is none.
  Model& model() const;
  void set_target(TrainingTarget target) { target_ = std::move(target); }
  const TrainingTarget& target() const { return target_; }
  virtual void set_params(const Params& params) { params_ = params; }
  const Params& params() const { return params_; }

  virtual void on_train_begin(const Logs& /*logs*/) {}
  virtual void on_train_end(const Logs& /*logs*/) {}
  virtual void on_epoch_begin(int /*epoch*/, const Logs& /*logs*/) {}
  virtual void on_epoch_end(int /*epoch*/, const Logs& /*logs*/) {}
  virtual void on_train_batch_begin(int64_t /*batch*/, const Logs& /*logs*/) {}
  virtual void on_train_batch_end(int64_t /*batch*/, const Logs& /*logs*/) {}
  // Whether on_train_batch_end reads its logs. fit computes the running loss and metrics after
  // every step only when some callback does — under a multi-worker strategy they are summed
  // across workers, a collective per step — and passes empty logs otherwise (Keras likewise
  // calls the batch hooks only when a callback implements them). True unless a callback says
  // otherwise; the built-in ones that read only epoch logs say false. Fixed for the whole fit.
  virtual bool uses_train_batch_logs() const { return true; }
  virtual void on_test_begin(const Logs& /*logs*/) {}
  virtual void on_test_end(const Logs& /*logs*/) {}
  virtual void on_test_batch_begin(int64_t /*batch*/, const Logs& /*logs*/) {}
  virtual void on_test_batch_end(int64_t /*batch*/, const Logs& /*logs*/) {}
  virtual void on_predict_begin(const Logs& /*logs*/) {}
  virtual void on_predict_end(const Logs& /*logs*/) {}
  virtual void on_predict_batch_begin(int64_t /*batch*/, const Logs& /*logs*/) {}
  virtual void on_predict_batch_end(int64_t /*batch*/, const Logs& /*logs*/) {}

 protected:
  Callback() = default;
  Callback(const Callback&) = default;
  Callback& operator=(const Callback&) = default;

  // Helpers over the target, with a clear error when it is not bound.
  void request_stop() const;
  optimizers::Optimizer& target_optimizer() const;
  std::vector<Variable> target_weights() const;
  void target_save_weights(const std::string& path) const;

 private:
  Model* model_ = nullptr;
  TrainingTarget target_;
  Params params_;
};

// Dispatches every hook to its callbacks, in order.
class CallbackList {
 public:
  CallbackList() = default;
  explicit CallbackList(std::vector<std::shared_ptr<Callback>> callbacks);
  void append(std::shared_ptr<Callback> callback);
  const std::vector<std::shared_ptr<Callback>>& callbacks() const { return callbacks_; }

  void set_model(Model* model);
  void set_target(const TrainingTarget& target);
  void set_params(const Params& params);

  void on_train_begin(const Logs& logs);
  void on_train_end(const Logs& logs);
  void on_epoch_begin(int epoch, const Logs& logs);
  void on_epoch_end(int epoch, const Logs& logs);
  void on_train_batch_begin(int64_t batch, const Logs& logs);
  void on_train_batch_end(int64_t batch, const Logs& logs);
  // Whether any callback's on_train_batch_end reads its logs (Callback::uses_train_batch_logs).
  bool uses_train_batch_logs() const;
  void on_test_begin(const Logs& logs);
  void on_test_end(const Logs& logs);
  void on_test_batch_begin(int64_t batch, const Logs& logs);
  void on_test_batch_end(int64_t batch, const Logs& logs);
  void on_predict_begin(const Logs& logs);
  void on_predict_end(const Logs& logs);
  void on_predict_batch_begin(int64_t batch, const Logs& logs);
  void on_predict_batch_end(int64_t batch, const Logs& logs);

 private:
  std::vector<std::shared_ptr<Callback>> callbacks_;
};

// Calls the given functions at the matching hooks (keras.callbacks.LambdaCallback).
struct LambdaCallbackOptions {
  std::function<void(int, const Logs&)> on_epoch_begin{};
  std::function<void(int, const Logs&)> on_epoch_end{};
  std::function<void(int64_t, const Logs&)> on_train_batch_begin{};
  std::function<void(int64_t, const Logs&)> on_train_batch_end{};
  std::function<void(const Logs&)> on_train_begin{};
  std::function<void(const Logs&)> on_train_end{};
};

class LambdaCallback final : public Callback {
 public:
  explicit LambdaCallback(LambdaCallbackOptions options) : o_(std::move(options)) {}
  void on_epoch_begin(int epoch, const Logs& logs) override {
    if (o_.on_epoch_begin) o_.on_epoch_begin(epoch, logs);
  }
  void on_epoch_end(int epoch, const Logs& logs) override {
    if (o_.on_epoch_end) o_.on_epoch_end(epoch, logs);
  }
  void on_train_batch_begin(int64_t batch, const Logs& logs) override {
    if (o_.on_train_batch_begin) o_.on_train_batch_begin(batch, logs);
  }
  void on_train_batch_end(int64_t batch, const Logs& logs) override {
    if (o_.on_train_batch_end) o_.on_train_batch_end(batch, logs);
  }
  bool uses_train_batch_logs() const override { return static_cast<bool>(o_.on_train_batch_end); }
  void on_train_begin(const Logs& logs) override {
    if (o_.on_train_begin) o_.on_train_begin(logs);
  }
  void on_train_end(const Logs& logs) override {
    if (o_.on_train_end) o_.on_train_end(logs);
  }

 private:
  LambdaCallbackOptions o_;
};

}  // namespace lockstep::keras::callbacks
