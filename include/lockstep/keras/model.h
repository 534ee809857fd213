#pragma once
// Model: a layer graph with training (keras.Model). Built functionally from symbolic tensors,
//
//   auto inputs = keras::Input({784});
//   auto h = layers::Dense({.units = 128, .activation = "relu"})(inputs);
//   auto outputs = layers::Dense({.units = 10, .activation = "softmax"})(h);
//   keras::Model model(inputs, outputs);
//
// or as a Sequential (sequential.h). A model belongs to the distribution strategy whose scope was
// open when it was created (else the default strategy); compile/fit/evaluate/predict run through
// that strategy's replicas: each replica computes on its slice of every global batch, gradients
// are summed across replicas, and each replica applies the optimizer to its own slice of the
// parameters (see docs/architecture.md).
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/data/dataset.h"
#include "lockstep/data/element.h"
#include "lockstep/distribute/per_replica.h"
#include "lockstep/keras/callbacks/callback.h"
#include "lockstep/keras/callbacks/history.h"
#include "lockstep/keras/keras_tensor.h"
#include "lockstep/keras/layer.h"
#include "lockstep/keras/losses.h"
#include "lockstep/keras/metrics/metric.h"
#include "lockstep/keras/optimizers/optimizer.h"

namespace lockstep::distribute {
class Strategy;
class DistributedDataset;
struct SyncStats;  // lockstep/distribute/sync_stats.h
}  // namespace lockstep::distribute

namespace lockstep::keras {

struct Trainer;  // the engine behind compile / fit / evaluate (src/keras/engine/trainer.h)

// Accepts an optimizer object (copied via clone()), a shared_ptr, or a Keras name ("adam").
struct OptimizerArg {
  std::shared_ptr<optimizers::Optimizer> ptr;
  OptimizerArg() = default;
  OptimizerArg(std::shared_ptr<optimizers::Optimizer> p) : ptr(std::move(p)) {}  // NOLINT
  OptimizerArg(const char* name);                                                // NOLINT
  OptimizerArg(const std::string& name) : OptimizerArg(name.c_str()) {}          // NOLINT
  template <typename O>
  requires std::derived_from<O, optimizers::Optimizer> OptimizerArg(const O& o)
      : ptr(o.clone()) {}  // NOLINT
};

// Accepts a loss object, a shared_ptr, or a Keras name ("categorical_crossentropy").
struct LossArg {
  std::shared_ptr<losses::Loss> ptr;
  LossArg() = default;
  LossArg(std::shared_ptr<losses::Loss> p) : ptr(std::move(p)) {}  // NOLINT
  LossArg(const char* name) : ptr(losses::get(name)) {}            // NOLINT
  LossArg(const std::string& name) : ptr(losses::get(name)) {}     // NOLINT
  template <typename L>
  requires std::derived_from<L, losses::Loss> LossArg(const L& l) : ptr(l.clone()) {}  // NOLINT
};

// Accepts a metric object, a shared_ptr, or a Keras name ("accuracy").
struct MetricArg {
  std::shared_ptr<metrics::Metric> ptr;
  MetricArg(std::shared_ptr<metrics::Metric> p) : ptr(std::move(p)) {}  // NOLINT
  MetricArg(const char* name);                                          // NOLINT
  MetricArg(const std::string& name) : MetricArg(name.c_str()) {}       // NOLINT
  template <typename M>
  requires std::derived_from<M, metrics::Metric> MetricArg(const M& m)
      : ptr(std::shared_ptr<metrics::Metric>(m.clone())) {}  // NOLINT
};

struct CompileOptions {
  OptimizerArg optimizer = "rmsprop";
  LossArg loss;
  std::vector<MetricArg> metrics;
  // Training steps each replica runs per dispatch from the host (amortises the hand-off).
  int steps_per_execution = 1;
};

struct FitOptions {
  int epochs = 1;
  // Steps per epoch; 0 runs each epoch until the dataset ends (it must then be finite). With a
  // value, one iterator continues across epochs (use repeat()).
  int64_t steps_per_epoch = 0;
  // 0 silent, 1 progress bar, 2 one line per epoch.
  int verbose = 1;
  std::vector<std::shared_ptr<callbacks::Callback>> callbacks;
  std::optional<Dataset> validation_data;
  int64_t validation_steps = 0;
  int initial_epoch = 0;
  // fit(x, y) only: the global batch size, shuffling each epoch, and its seed.
  int64_t batch_size = 32;
  bool shuffle = true;
  uint64_t shuffle_seed = 0;
};

struct EvaluateOptions {
  int64_t steps = 0;  // 0: until the dataset ends
  int verbose = 0;
  int64_t batch_size = 32;  // evaluate(x, y) only
  std::vector<std::shared_ptr<callbacks::Callback>> callbacks;
};

class Model : public LayerImpl<Model> {
 public:
  Model(const KerasTensor& inputs, const KerasTensor& outputs, const std::string& name = "");
  Model(const std::vector<KerasTensor>& inputs, const KerasTensor& outputs,
        const std::string& name = "");
  ~Model() override;
  Model(Model&&) noexcept;

  std::string class_name() const override { return "Functional"; }
  Tensor call(const Tensor& inputs, bool training) override;
  Tensor call(const std::vector<Tensor>& inputs, bool training) override;
  bool accepts_multiple_inputs() const override { return true; }
  std::vector<Shape> compute_output_shapes(const std::vector<Shape>& input_shapes) const override;
  void build(const std::vector<Shape>& input_shapes) override;

  // The layers in topological order (inputs first).
  virtual std::vector<std::shared_ptr<Layer>> layers() const;
  // The graph's symbolic inputs and output (Keras' model.inputs, model.outputs[0]); empty and
  // undefined for a Sequential without an Input that has not been built yet.
  std::vector<KerasTensor> inputs() const;
  KerasTensor output() const;
  // The dtype of the (first) Input; float32 when the model has no Input yet. fit/evaluate/predict
  // convert integer batches (uint8 images) to it when it is floating, and pass them through when
  // the Input is declared integer (for a model that starts with Rescaling).
  DType input_dtype() const;

  void compile(CompileOptions options);
  callbacks::History fit(const Dataset& dataset, FitOptions options = {});
  callbacks::History fit(const Tensor& x, const Tensor& y, FitOptions options = {});
  // A dataset distributed by this model's strategy (as Keras fits a tf.distribute
  // DistributedDataset), e.g. per-replica pipelines from distribute_datasets_from_function.
  callbacks::History fit(const distribute::DistributedDataset& dataset, FitOptions options = {});
  // {"loss": ..., "<metric>": ...}
  std::map<std::string, double> evaluate(const Dataset& dataset, EvaluateOptions options = {});
  std::map<std::string, double> evaluate(const Tensor& x, const Tensor& y,
                                         EvaluateOptions options = {});
  // Outputs for every example, in order. The dataset yields batches; element 0 is the input.
  Tensor predict(const Dataset& dataset, int64_t steps = 0);
  Tensor predict(const Tensor& x, int64_t batch_size = 32);
  // One step on one global batch; returns {"loss": ..., metrics...} for this batch.
  std::map<std::string, double> train_on_batch(const Tensor& x, const Tensor& y);

  // Keras' Model.train_step(data): one training step, which fit and train_on_batch call for every
  // batch of arrays or of a Dataset. `data` is the batch as the model's strategy distributed it:
  // data[r] is local replica r's slice of the global batch (under the default strategy, one slice:
  // the whole batch), each an element (x, y, ...). The default runs the strategy's replicated
  // step — every replica's forward and backward on its slice, the gradients summed, the
  // optimizer's update — and returns no logs: fit then reports the running loss and metrics of
  // the epoch. An override may do anything (its own GradientTape and
  // optimizer().apply_gradients, say) and return the logs fit reports (Keras: the metrics'
  // results). Per-replica pipelines (distribute_datasets_from_function) pull their batches inside
  // the replicas' tasks and always take the default step.
  virtual callbacks::Logs train_step(const distribute::PerReplica<Element>& data);

  // Keras' table: layer (type), output shape, params; totals.
  std::string summary() const;
  void save_weights(const std::string& path) const;
  void load_weights(const std::string& path);

  // The values of the weights in Keras 3's order (Layer.weights: layer by layer in the model's
  // layer order, each layer's trainable then non-trainable weights, nested models recursively,
  // a shared weight once). Copies.
  std::vector<Tensor> get_weights() const;
  // Assigns `weights` in get_weights' order. Throws InvalidArgument, assigning nothing, when the
  // count differs or a value's shape or dtype differs from its weight's (naming both).
  void set_weights(const std::vector<Tensor>& weights);

  // Keras 3's Functional config (saving/model_config.h); Sequential overrides it.
  nlohmann::json get_config() const override;
  // serialize_keras_object(model) with build_config and compile_config, as text (Keras'
  // model.to_json()); read back with keras::models::model_from_json.
  std::string to_json() const;
  // The whole model as a Keras 3 `.keras` archive (saving/saving_lib.h): config, weights and the
  // optimizer's state. Atomic: the file is complete or untouched.
  void save(const std::string& path) const;
  // Keras' get_compile_config: {"optimizer", "loss", "metrics", "steps_per_execution", ...}
  // serialized; an empty object before compile().
  nlohmann::json get_compile_config() const;
  // compile() from get_compile_config()'s output (optimizer, loss and metrics through the
  // registry, saving/object_registration.h).
  void compile_from_config(const nlohmann::json& config);

  optimizers::Optimizer& optimizer();
  const optimizers::Optimizer& optimizer() const;
  const losses::Loss& loss() const;
  distribute::Strategy& distribute_strategy() const { return *strategy_; }
  // Time and bytes of the gradient sum and update, and the backup task runs, accumulated over
  // every training step so far (all zeros before the first). See distribute/sync_stats.h.
  distribute::SyncStats gradient_sync_stats() const;
  bool compiled() const { return trainer_ != nullptr; }
  bool contains_layers() const override { return true; }
  // Set by callbacks (EarlyStopping, TerminateOnNaN) to end fit after the current step.
  bool stop_training = false;

 protected:
  // For Sequential: a model whose graph is defined by its subclass.
  Model(const std::string& name, const std::string& prefix);
  std::vector<Variable> own_weights() const override;
  void set_graph(std::vector<KerasTensor> inputs, KerasTensor outputs);

 private:
  struct Graph;
  friend struct Trainer;
  std::unique_ptr<Graph> graph_;
  std::unique_ptr<Trainer> trainer_;  // set by compile()
  distribute::Strategy* strategy_;
};

}  // namespace lockstep::keras
