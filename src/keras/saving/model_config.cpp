#include "lockstep/keras/saving/model_config.h"

#include <functional>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "builtins.h"
#include "lockstep/core/error.h"
#include "lockstep/keras/layers/input_layer.h"
#include "lockstep/keras/saving/serialization_lib.h"
#include "lockstep/keras/sequential.h"

namespace lockstep::keras::saving {

namespace {

using nlohmann::json;

json shape_json(const Shape& s) {
  json out = json::array();
  for (int i = 0; i < s.rank(); ++i) out.push_back(i == 0 ? json(nullptr) : json(s[i]));
  return out;
}

json shapes_json(const std::vector<Shape>& shapes) {
  if (shapes.size() == 1) return shape_json(shapes[0]);
  json out = json::array();
  for (const Shape& s : shapes) out.push_back(shape_json(s));
  return out;
}

// Keras counts a nested Functional model's calls from 1: its own graph is node 0.
int first_node_index(const Layer& layer) {
  return layer.class_name() == "Functional" ? 1 : 0;
}

[[noreturn]] void bad_config(const std::string& model, const std::string& what) {
  throw InvalidArgument("model config '" + model + "': " + what);
}

const json& member(const json& j, const char* key, const std::string& model,
                   const std::string& where) {
  if (!j.is_object() || !j.contains(key)) {
    bad_config(model, where + " has no '" + key + "'.");
  }
  return j[key];
}

// The __keras_tensor__ references in a node's arguments, in order.
void collect_tensors(const json& j, std::vector<json>& out) {
  if (j.is_array()) {
    for (const json& e : j) collect_tensors(e, out);
  } else if (j.is_object() && j.value("class_name", std::string()) == "__keras_tensor__") {
    out.push_back(j.at("config").at("keras_history"));
  }
}

// [name, node_index, tensor_index] references of one inbound node, Keras 3's or Keras 2's form.
std::vector<json> node_references(const json& node) {
  std::vector<json> refs;
  if (node.is_object()) {
    collect_tensors(node.value("args", json::array()), refs);
    const json kwargs = node.value("kwargs", json::object());
    // MultiHeadAttention called with keywords: query, value, key, in its signature's order.
    for (const char* key : {"query", "value", "key"}) {
      if (kwargs.contains(key)) collect_tensors(kwargs[key], refs);
    }
  } else if (node.is_array()) {
    for (const json& r : node) refs.push_back(r);  // Keras 2: [[name, node, tensor, {kwargs}]]
  }
  return refs;
}

std::string history_key(const std::string& layer, int node_index) {
  return layer + "#" + std::to_string(node_index);
}

}  // namespace

json functional_config(const Model& model) {
  LOCKSTEP_CHECK_AS(FailedPrecondition, model.output().defined(), "get_config: model '",
                    model.name(), "' has no graph yet.");
  const auto order = topological_order(model.output());
  // Each layer's calls, in order; layers in order of their first call.
  std::vector<std::shared_ptr<Layer>> layers;
  std::map<const Layer*, std::vector<const KerasNode*>> calls;
  for (const auto& n : order) {
    auto& c = calls[n->layer.get()];
    if (c.empty()) layers.push_back(n->layer);
    c.push_back(n.get());
  }
  auto history = [&](const KerasNode* n) {
    const auto& c = calls.at(n->layer.get());
    int index = first_node_index(*n->layer) +
                static_cast<int>(std::find(c.begin(), c.end(), n) - c.begin());
    return json::array({n->layer->name(), index, 0});
  };
  auto tensor = [&](const KerasTensor& t) {
    return json{{"class_name", "__keras_tensor__"},
                {"config",
                 {{"shape", shape_json(t.shape())},
                  {"dtype", std::string(dtype_name(t.dtype()))},
                  {"keras_history", history(t.node().get())}}}};
  };
  json layer_configs = json::array();
  for (const auto& layer : layers) {
    json entry = serialize_keras_object(*layer);
    entry["name"] = layer->name();
    json inbound = json::array();
    for (const KerasNode* n : calls.at(layer.get())) {
      if (n->inputs.empty()) continue;  // an InputLayer's own node
      json args = json::array();
      if (n->inputs.size() == 1) {
        args.push_back(tensor(n->inputs[0]));
      } else {
        json list = json::array();
        for (const KerasTensor& t : n->inputs) list.push_back(tensor(t));
        args.push_back(list);
      }
      inbound.push_back({{"args", args}, {"kwargs", json::object()}});
      if (!entry.contains("build_config")) {
        std::vector<Shape> shapes;
        for (const KerasTensor& t : n->inputs) shapes.push_back(t.shape());
        entry["build_config"] = {{"input_shape", shapes_json(shapes)}};
      }
    }
    entry["inbound_nodes"] = inbound;
    layer_configs.push_back(entry);
  }
  json inputs = json::array();
  for (const KerasTensor& t : model.inputs()) inputs.push_back(history(t.node().get()));
  return {{"name", model.name()},
          {"trainable", model.trainable()},
          {"layers", layer_configs},
          {"input_layers", inputs.size() == 1 ? inputs[0] : inputs},
          {"output_layers", history(model.output().node().get())}};
}

json sequential_config(const Sequential& model) {
  json layer_configs = json::array();
  std::optional<Shape> shape;
  if (!model.inputs().empty()) {
    const KerasTensor in = model.inputs()[0];
    layer_configs.push_back(serialize_keras_object(*in.node()->layer));
    shape = in.shape();
  }
  for (const auto& layer : model.layers()) {
    json entry = serialize_keras_object(*layer);
    if (shape) {
      entry["build_config"] = {{"input_shape", shape_json(*shape)}};
      std::vector<Shape> in_shapes;
      in_shapes.push_back(*shape);
      shape = layer->compute_output_shapes(in_shapes)[0];
    }
    layer_configs.push_back(entry);
  }
  json out = {{"name", model.name()},
              {"trainable", model.trainable()},
              {"dtype", serialize_dtype_policy(model.dtype_policy().name())},
              {"layers", layer_configs}};
  if (!model.inputs().empty()) out["build_input_shape"] = shape_json(model.inputs()[0].shape());
  return out;
}

std::shared_ptr<Model> functional_from_config(const json& config) {
  const std::string name = config.value("name", std::string());
  const json& layer_configs = member(config, "layers", name, "the config");
  if (!layer_configs.is_array()) bad_config(name, "'layers' is not a list.");

  struct Pending {
    std::shared_ptr<Layer> layer;
    std::string name;
    json nodes;
    size_t next = 0;  // the next inbound node to call
  };
  std::vector<Pending> pending;
  std::map<std::string, KerasTensor> outputs;  // history_key -> output
  std::set<std::string> names;
  for (const json& entry : layer_configs) {
    const std::string cls = member(entry, "class_name", name, "a layer entry");
    const json& inner = member(entry, "config", name, "layer entry '" + cls + "'");
    std::string layer_name = entry.value("name", inner.value("name", std::string()));
    if (layer_name.empty()) bad_config(name, "a '" + cls + "' layer has no name.");
    if (!names.insert(layer_name).second)
      bad_config(name, "two layers are named '" + layer_name + "'.");
    if (cls == "InputLayer") {
      std::vector<int64_t> b = internal::batch_shape_of(inner);
      outputs[history_key(layer_name, 0)] = Input(
          Shape(b).without(0),
          internal::dtype_from_name(inner.value("dtype", std::string("float32"))), layer_name);
      continue;
    }
    std::shared_ptr<Layer> layer;
    try {
      layer = deserialize_layer(entry);
    } catch (const Error& e) {
      throw InvalidArgument("model config '" + name + "', layer '" + layer_name + "': " + e.what());
    }
    pending.push_back({layer, layer_name, entry.value("inbound_nodes", json::array())});
  }
  // Call the layers on their inputs, deferring a call until its inputs exist (a shared layer's
  // later calls may use layers listed after it).
  for (bool progress = true; progress;) {
    progress = false;
    for (Pending& p : pending) {
      while (p.next < p.nodes.size()) {
        std::vector<KerasTensor> args;
        bool ready = true;
        for (const json& ref : node_references(p.nodes[p.next])) {
          if (!ref.is_array() || ref.size() < 2 || !ref[0].is_string() ||
              !ref[1].is_number_integer()) {
            bad_config(name,
                       "layer '" + p.name + "' has a bad tensor reference " + ref.dump() + ".");
          }
          auto it = outputs.find(history_key(ref[0], ref[1]));
          if (it == outputs.end()) {
            ready = false;
            break;
          }
          args.push_back(it->second);
        }
        if (!ready) break;
        if (args.empty()) bad_config(name, "layer '" + p.name + "' has a call without inputs.");
        KerasTensor out;
        try {
          out = args.size() == 1 ? (*p.layer)(args[0]) : (*p.layer)(args);
        } catch (const Error& e) {
          throw InvalidArgument("model config '" + name + "', layer '" + p.name + "': " + e.what());
        }
        outputs[history_key(p.name, first_node_index(*p.layer) + static_cast<int>(p.next))] = out;
        ++p.next;
        progress = true;
      }
    }
  }
  for (const Pending& p : pending) {
    if (p.next < p.nodes.size()) {
      bad_config(name, "layer '" + p.name + "' is called on " +
                           node_references(p.nodes[p.next])[0].dump() +
                           ", which no layer of the config produces.");
    }
  }
  auto lookup = [&](const json& ref) {
    if (!ref.is_array() || ref.size() < 2 || !ref[0].is_string() || !ref[1].is_number_integer()) {
      bad_config(name, "bad input or output reference " + ref.dump() + ".");
    }
    auto it = outputs.find(history_key(ref[0], ref[1]));
    if (it == outputs.end()) bad_config(name, "no layer produces " + ref.dump() + ".");
    return it->second;
  };
  auto references = [&](const json& j) {
    std::vector<KerasTensor> out;
    if (j.is_array() && !j.empty() && j[0].is_string()) {
      out.push_back(lookup(j));
    } else if (j.is_array()) {
      for (const json& r : j) out.push_back(lookup(r));
    }
    return out;
  };
  std::vector<KerasTensor> inputs = references(member(config, "input_layers", name, "the config"));
  std::vector<KerasTensor> outs = references(member(config, "output_layers", name, "the config"));
  if (inputs.empty()) bad_config(name, "'input_layers' is empty.");
  if (outs.size() != 1) {
    bad_config(name, "expected one output. Received " + std::to_string(outs.size()) +
                         " (models with several outputs are not supported).");
  }
  auto model = std::make_shared<Model>(inputs, outs[0], name);
  model->set_trainable(config.value("trainable", true));
  return model;
}

std::shared_ptr<Sequential> sequential_from_config(const json& config) {
  const std::string name = config.value("name", std::string());
  const json& layer_configs = member(config, "layers", name, "the config");
  if (!layer_configs.is_array()) bad_config(name, "'layers' is not a list.");
  auto model = std::make_shared<Sequential>(std::vector<LayerArg>{}, name);
  for (const json& entry : layer_configs) {
    const std::string cls = member(entry, "class_name", name, "a layer entry");
    const json& inner = member(entry, "config", name, "layer entry '" + cls + "'");
    try {
      if (cls == "InputLayer") {
        std::vector<int64_t> b = internal::batch_shape_of(inner);
        model->add(Input(Shape(b).without(0),
                         internal::dtype_from_name(inner.value("dtype", std::string("float32"))),
                         inner.value("name", std::string())));
      } else {
        model->add(deserialize_layer(entry));
      }
    } catch (const Error& e) {
      throw InvalidArgument("model config '" + name + "', layer '" + inner.value("name", cls) +
                            "': " + e.what());
    }
  }
  if (model->inputs().empty() && config.contains("build_input_shape") &&
      config["build_input_shape"].is_array()) {
    std::vector<int64_t> b;
    for (const json& d : config["build_input_shape"])
      b.push_back(d.is_null() ? 0 : d.get<int64_t>());
    model->build({Shape(b)});
  }
  model->set_trainable(config.value("trainable", true));
  return model;
}

json serialize_model(const Model& model) {
  json out = serialize_keras_object(model);
  if (!model.inputs().empty()) {
    std::vector<Shape> shapes;
    for (const KerasTensor& t : model.inputs()) shapes.push_back(t.shape());
    out["build_config"] = {{"input_shape", shapes_json(shapes)}};
  }
  if (model.compiled()) out["compile_config"] = model.get_compile_config();
  return out;
}

std::shared_ptr<Model> deserialize_model(const json& serialized, bool compile) {
  std::shared_ptr<Layer> layer = deserialize_layer(serialized);
  auto model = std::dynamic_pointer_cast<Model>(layer);
  if (!model) {
    throw InvalidArgument(
        "deserialize_model: expected a Sequential or Functional model. "
        "Received class '" +
        layer->class_name() + "'.");
  }
  if (compile && serialized.contains("compile_config") &&
      serialized["compile_config"].is_object() && !serialized["compile_config"].empty()) {
    model->compile_from_config(serialized["compile_config"]);
  }
  return model;
}

}  // namespace lockstep::keras::saving

namespace lockstep::keras::models {

std::shared_ptr<Model> model_from_json(const std::string& json_text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(std::string("model_from_json: the text is not JSON: ") + e.what());
  }
  return saving::deserialize_model(j);
}

}  // namespace lockstep::keras::models
