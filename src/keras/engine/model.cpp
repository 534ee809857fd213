#include "lockstep/keras/model.h"

#include <algorithm>
#include <functional>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unordered_map>

#include "lockstep/core/check.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/keras/layers/core.h"
#include "lockstep/keras/layers/merge.h"
#include "lockstep/keras/metrics.h"
#include "lockstep/keras/optimizers.h"
#include "lockstep/keras/saving/model_config.h"
#include "lockstep/keras/saving/safetensors.h"
#include "lockstep/keras/saving/saving_lib.h"

#include "lockstep/keras/saving/serialization_lib.h"
#include "trainer.h"

namespace lockstep::keras {

struct Model::Graph {
  std::vector<KerasTensor> inputs;
  KerasTensor outputs;
  std::vector<std::shared_ptr<KerasNode>> order;  // topological, inputs first
  // Per node of `order`: the layers that read its output (one entry per read).
  std::vector<std::vector<const Layer*>> readers;
};

namespace {

// mixed_bfloat16's float32 form: whether a node's output is read only by layers that round what
// they read as they read it (an Add in the float32 form rounds both inputs of one shape in its
// sum's pass), so the node's layer may leave it unrounded. Not the model's output.
bool read_only_by_rounding_adds(const std::vector<const Layer*>& readers) {
  if (readers.empty()) return false;
  for (const Layer* r : readers) {
    const auto* add = dynamic_cast<const layers::Add*>(r);
    if (!add || !add->computes_bfloat16_in_float32()) return false;
  }
  return true;
}

// Whether every reader of a node's output multiplies it transposed (Layer::reads_input_transposed),
// so that the node's layer may write the output's transpose beside it. Not the model's output.
bool read_only_transposed(const std::vector<const Layer*>& readers) {
  if (readers.empty()) return false;
  for (const Layer* r : readers) {
    if (!r->reads_input_transposed()) return false;
  }
  return true;
}

}  // namespace

OptimizerArg::OptimizerArg(const char* name) : ptr(optimizers::get(name)) {}
MetricArg::MetricArg(const char* name)
    : ptr(std::shared_ptr<metrics::Metric>(metrics::get(name))) {}

Model::Model(const std::string& name, const std::string& prefix)
    : LayerImpl(name, prefix), strategy_(&distribute::get_strategy()) {}

Model::Model(const KerasTensor& inputs, const KerasTensor& outputs, const std::string& name)
    : Model(std::vector<KerasTensor>{inputs}, outputs, name) {}

Model::Model(const std::vector<KerasTensor>& inputs, const KerasTensor& outputs,
             const std::string& name)
    : Model(name, "functional") {
  set_graph(inputs, outputs);
}

Model::~Model() = default;
Model::Model(Model&& other) noexcept
    : LayerImpl(std::move(other)),
      stop_training(other.stop_training),
      graph_(std::move(other.graph_)),
      trainer_(std::move(other.trainer_)),
      strategy_(other.strategy_) {
  if (trainer_) trainer_->model = this;
}

callbacks::Logs Model::train_step(const distribute::PerReplica<Element>& data) {
  trainer_->train_on(data);
  return {};
}

void Model::set_graph(std::vector<KerasTensor> inputs, KerasTensor outputs) {
  auto g = std::make_unique<Graph>();
  g->order = topological_order(outputs);
  for (const KerasTensor& in : inputs) {
    LOCKSTEP_CHECK(in.defined() && in.node()->inputs.empty(),
                   "Model: every input must come from keras::Input().");
    LOCKSTEP_CHECK(std::find(g->order.begin(), g->order.end(), in.node()) != g->order.end(),
                   "Model: the outputs do not depend on input '", in.node()->layer->name(), "'.");
  }
  for (const auto& n : g->order) {
    LOCKSTEP_CHECK(
        !n->inputs.empty() || std::any_of(inputs.begin(), inputs.end(),
                                          [&](const KerasTensor& t) { return t.node() == n; }),
        "Model: the graph uses input '", n->layer->name(),
        "', which is not in the model's inputs.");
  }
  std::unordered_map<const KerasNode*, size_t> index;
  for (size_t i = 0; i < g->order.size(); ++i) index[g->order[i].get()] = i;
  g->readers.resize(g->order.size());
  for (const auto& n : g->order) {
    for (const KerasTensor& t : n->inputs)
      g->readers[index.at(t.node().get())].push_back(n->layer.get());
  }
  g->readers[index.at(outputs.node().get())].clear();  // the caller reads the model's output
  g->inputs = std::move(inputs);
  g->outputs = std::move(outputs);
  graph_ = std::move(g);
  set_built();
}

std::vector<std::shared_ptr<Layer>> Model::layers() const {
  std::vector<std::shared_ptr<Layer>> out;
  if (!graph_) return out;
  for (const auto& n : graph_->order) out.push_back(n->layer);
  return out;
}

void Model::build(const std::vector<Shape>&) {}

std::vector<KerasTensor> Model::inputs() const {
  return graph_ ? graph_->inputs : std::vector<KerasTensor>{};
}

KerasTensor Model::output() const {
  return graph_ ? graph_->outputs : KerasTensor{};
}

DType Model::input_dtype() const {
  return graph_ && !graph_->inputs.empty() ? graph_->inputs[0].dtype() : DType::float32;
}

std::vector<Shape> Model::compute_output_shapes(const std::vector<Shape>& input_shapes) const {
  (void)input_shapes;
  LOCKSTEP_CHECK_AS(FailedPrecondition, graph_, "Model '", name(), "' has no graph yet.");
  return {graph_->outputs.shape()};
}

Tensor Model::call(const Tensor& inputs, bool training) {
  return call(std::vector<Tensor>{inputs}, training);
}

Tensor Model::call(const std::vector<Tensor>& inputs, bool training) {
  LOCKSTEP_CHECK_AS(FailedPrecondition, graph_, "Model '", name(), "' has no layers to call.");
  LOCKSTEP_CHECK(inputs.size() == graph_->inputs.size(), "Model '", name(), "' expects ",
                 graph_->inputs.size(), " inputs. Received ", inputs.size(), ".");
  detail::LayerCallScope scope;  // the layers' calls are inner ones
  std::unordered_map<KerasNode*, Tensor> values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    KerasNode* n = graph_->inputs[i].node().get();
    values[n] = n->layer->call(inputs[i], training);
  }
  for (size_t i = 0; i < graph_->order.size(); ++i) {
    const auto& n = graph_->order[i];
    if (n->inputs.empty()) continue;
    std::vector<Tensor> args;
    for (const KerasTensor& t : n->inputs) args.push_back(values.at(t.node().get()));
    const detail::NextOutputReaders readers(read_only_by_rounding_adds(graph_->readers[i]),
                                            training && read_only_transposed(graph_->readers[i]));
    values[n.get()] =
        args.size() == 1 ? (*n->layer)(args[0], training) : (*n->layer)(args, training);
  }
  return values.at(graph_->outputs.node().get());
}

std::vector<Variable> Model::own_weights() const {
  std::vector<Variable> out;
  std::set<const void*> seen;
  for (const auto& layer : layers()) {
    for (const Variable& v : layer->weights()) {
      // A layer used twice in a graph shares its weights: list them once.
      if (seen.insert(&v.raw_value()).second) out.push_back(v);
    }
  }
  return out;
}

namespace {
// Keras 3's Layer.weights order: a model's layers in order, nested models recursively.
void collect_keras_weights(const Layer& layer, std::vector<Variable>& out,
                           std::set<const void*>& seen) {
  if (const auto* model = dynamic_cast<const Model*>(&layer)) {
    for (const auto& l : model->layers()) collect_keras_weights(*l, out, seen);
    return;
  }
  for (const Variable& v : layer.weights()) {
    if (seen.insert(&v.raw_value()).second) out.push_back(v);
  }
}

std::vector<Variable> keras_ordered_weights(const Model& model) {
  std::vector<Variable> out;
  std::set<const void*> seen;
  collect_keras_weights(model, out, seen);
  return out;
}
}  // namespace

std::vector<Tensor> Model::get_weights() const {
  std::vector<Tensor> out;
  for (const Variable& v : keras_ordered_weights(*this)) out.push_back(v.raw_value().clone());
  return out;
}

void Model::set_weights(const std::vector<Tensor>& weights) {
  std::vector<Variable> ws = keras_ordered_weights(*this);
  LOCKSTEP_CHECK(weights.size() == ws.size(), "set_weights: model '", name(), "' expects ",
                 ws.size(), " weights. Received a list of ", weights.size(), ".");
  for (size_t i = 0; i < ws.size(); ++i) {
    const Tensor& w = weights[i];
    LOCKSTEP_CHECK(w.defined() && w.shape() == ws[i].shape() && w.dtype() == ws[i].dtype(),
                   "set_weights: weight ", i, " of model '", name(), "' ('", ws[i].name(), "') is ",
                   ws[i].raw_value().describe(),
                   ". Received: ", w.defined() ? w.describe() : std::string("an undefined tensor"),
                   ".");
  }
  for (size_t i = 0; i < ws.size(); ++i) ws[i].assign(weights[i]);
}

nlohmann::json Model::get_config() const {
  return saving::functional_config(*this);
}

void Model::save(const std::string& path) const {
  saving::save_model(*this, path);
}

std::string Model::to_json() const {
  return saving::serialize_model(*this).dump();
}

nlohmann::json Model::get_compile_config() const {
  if (!trainer_) return nlohmann::json::object();
  nlohmann::json metrics = nlohmann::json::array();
  for (const auto& m : trainer_->metrics) metrics.push_back(saving::serialize_keras_object(*m));
  return {{"optimizer", saving::serialize_keras_object(*trainer_->optimizer)},
          {"loss", saving::serialize_keras_object(*trainer_->loss)},
          {"loss_weights", nullptr},
          {"metrics", metrics},
          {"weighted_metrics", nullptr},
          {"run_eagerly", false},
          {"steps_per_execution", trainer_->steps_per_execution},
          {"jit_compile", false}};
}

void Model::compile_from_config(const nlohmann::json& config) {
  LOCKSTEP_CHECK(config.is_object() && config.contains("optimizer") && config.contains("loss"),
                 "compile_from_config: expected an object with 'optimizer' and 'loss'. Received: ",
                 config.dump().substr(0, 200));
  CompileOptions o;
  o.optimizer = saving::deserialize_optimizer(config["optimizer"]);
  o.loss = saving::deserialize_loss(config["loss"]);
  if (config.contains("metrics") && config["metrics"].is_array()) {
    for (const auto& m : config["metrics"]) o.metrics.emplace_back(saving::deserialize_metric(m));
  }
  if (config.contains("steps_per_execution") && config["steps_per_execution"].is_number_integer()) {
    o.steps_per_execution = config["steps_per_execution"];
  }
  compile(std::move(o));
}

optimizers::Optimizer& Model::optimizer() {
  LOCKSTEP_CHECK_AS(FailedPrecondition, trainer_, "Model '", name(),
                    "' is not compiled: call compile() first.");
  return *trainer_->optimizer;
}

const optimizers::Optimizer& Model::optimizer() const {
  LOCKSTEP_CHECK_AS(FailedPrecondition, trainer_, "Model '", name(),
                    "' is not compiled: call compile() first.");
  return *trainer_->optimizer;
}

distribute::SyncStats Model::gradient_sync_stats() const {
  return trainer_ && trainer_->step ? trainer_->step->stats() : distribute::SyncStats{};
}

const losses::Loss& Model::loss() const {
  LOCKSTEP_CHECK_AS(FailedPrecondition, trainer_, "Model '", name(),
                    "' is not compiled: call compile() first.");
  return *trainer_->loss;
}

void Model::compile(CompileOptions options) {
  LOCKSTEP_CHECK(options.optimizer.ptr, "compile: an optimizer is required.");
  LOCKSTEP_CHECK(options.loss.ptr, "compile: a loss is required.");
  LOCKSTEP_CHECK(
      options.steps_per_execution >= 1,
      "compile: expected steps_per_execution >= 1. Received: ", options.steps_per_execution, ".");
  trainer_ = std::make_unique<Trainer>(*this, options);
}

std::string Model::summary() const {
  std::ostringstream os;
  auto shape_str = [](const Shape& s) {
    std::string r = "(";
    for (int i = 0; i < s.rank(); ++i) {
      if (i) r += ", ";
      r += i == 0 ? std::string("None") : std::to_string(s[i]);
    }
    return r + (s.rank() == 1 ? ",)" : ")");
  };
  const int w1 = 29, w2 = 26, w3 = 10;
  std::string rule(w1 + w2 + w3, '_');
  os << "Model: \"" << name() << "\"\n" << rule << "\n";
  os << std::left << std::setw(w1) << " Layer (type)" << std::setw(w2) << "Output Shape"
     << "Param #\n";
  os << std::string(w1 + w2 + w3, '=') << "\n";
  int64_t total = 0, trainable = 0;
  bool first = true;
  if (graph_) {
    for (const auto& n : graph_->order) {
      if (n->inputs.empty() && class_name() == "Sequential") continue;
      Shape out;
      if (n->inputs.empty()) {
        out = static_cast<const layers::InputLayer&>(*n->layer).batch_shape();
      } else {
        std::vector<Shape> in;
        for (const KerasTensor& t : n->inputs) in.push_back(t.shape());
        out = n->layer->compute_output_shapes(in)[0];
      }
      int64_t params = n->layer->count_params();
      if (!first) os << "\n";
      first = false;
      os << std::left << std::setw(w1)
         << (" " + n->layer->name() + " (" + n->layer->class_name() + ")") << std::setw(w2)
         << shape_str(out) << params << "\n";
    }
  }
  for (const Variable& v : weights()) {
    total += v.num_elements();
    if (v.trainable()) trainable += v.num_elements();
  }
  os << std::string(w1 + w2 + w3, '=') << "\n";
  os << "Total params: " << total << "\nTrainable params: " << trainable
     << "\nNon-trainable params: " << (total - trainable) << "\n"
     << rule << "\n";
  return os.str();
}

void Model::save_weights(const std::string& path) const {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::set<std::string> names;
  for (const Variable& v : weights()) {
    const bool unique = names.insert(v.name()).second;
    LOCKSTEP_CHECK(unique, "save_weights: two weights are named '", v.name(),
                   "'; give the layers unique names.");
    tensors.emplace_back(v.name(), v.raw_value());
  }
  saving::save_safetensors(path, tensors,
                           {{"format", "lockstep"}, {"model", name()}, {"class", class_name()}});
}

void Model::load_weights(const std::string& path) {
  saving::SafetensorsFile file = saving::load_safetensors(path);
  std::vector<Variable> ws = weights();
  LOCKSTEP_CHECK(file.tensors.size() == ws.size(), "load_weights: '", path, "' holds ",
                 file.tensors.size(), " tensors; model '", name(), "' has ", ws.size(),
                 " weights.");
  // By name when every weight's path is in the file (the same model, or one built with the same
  // layer names); otherwise by position, as Keras 2 matches weights in layer order — automatic
  // names differ between two models built in one process ("dense" vs "dense_2").
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [key, tensor] : file.tensors) by_name[key] = &tensor;
  bool all_named = std::all_of(ws.begin(), ws.end(),
                               [&](const Variable& v) { return by_name.count(v.name()) > 0; });
  std::vector<const Tensor*> sources;
  for (size_t i = 0; i < ws.size(); ++i) {
    const Variable& v = ws[i];
    const auto& [saved_name, saved] = file.tensors[i];
    const Tensor* t = all_named ? by_name.at(v.name()) : &saved;
    LOCKSTEP_CHECK(t->shape() == v.shape() && t->dtype() == v.dtype(), "load_weights: weight '",
                   v.name(), "' of model '", name(), "' is ", v.raw_value().describe(), ", but '",
                   path, "' holds ", t->describe(), " for it (tensor '",
                   all_named ? v.name() : saved_name,
                   "'). Was the file saved from a different architecture?");
    sources.push_back(t);
  }
  for (size_t i = 0; i < ws.size(); ++i) ws[i].assign(*sources[i]);
}

std::vector<std::shared_ptr<KerasNode>> topological_order(const KerasTensor& output) {
  std::vector<std::shared_ptr<KerasNode>> order;
  std::set<KerasNode*> seen;
  std::function<void(const std::shared_ptr<KerasNode>&)> visit =
      [&](const std::shared_ptr<KerasNode>& n) {
        if (!seen.insert(n.get()).second) return;
        for (const KerasTensor& in : n->inputs) visit(in.node());
        order.push_back(n);
      };
  visit(output.node());
  return order;
}

}  // namespace lockstep::keras
