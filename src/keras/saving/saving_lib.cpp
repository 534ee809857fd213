#include "lockstep/keras/saving/saving_lib.h"

#include <ctime>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "lockstep/core/atomic_file.h"
#include "lockstep/core/error.h"
#include "lockstep/keras/layers/attention.h"
#include "lockstep/keras/model.h"
#include "lockstep/keras/saving/h5_store.h"
#include "lockstep/keras/saving/model_config.h"
#include "lockstep/keras/saving/zip_archive.h"

namespace lockstep::keras::saving {

namespace {

using nlohmann::json;

constexpr const char* kConfig = "config.json";
constexpr const char* kMetadata = "metadata.json";
constexpr const char* kWeights = "model.weights.h5";
constexpr size_t kMaxJsonBytes = size_t(64) << 20;

// keras.src.utils.naming.to_snake_case.
std::string to_snake_case(const std::string& name) {
  static const std::regex word(R"((.)([A-Z][a-z]+))"), lower_upper(R"(([a-z])([A-Z]))");
  std::string s = std::regex_replace(name, word, "$1_$2");
  s = std::regex_replace(s, lower_upper, "$1_$2");
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// saving_lib._get_unique_name.
std::string unique_name(const std::string& name, std::map<std::string, int>& used) {
  auto it = used.find(name);
  if (it == used.end()) {
    used[name] = 0;
    return name;
  }
  return name + "_" + std::to_string(++it->second);
}

std::string join(const std::string& a, const std::string& b) {
  return a.empty() ? b : a + "/" + b;
}

// One group of variables: "P/vars" and what it belongs to.
struct VarGroup {
  std::string path;
  std::string name;  // the layer's (or model's, or optimizer's) name
  std::vector<Variable> vars;
};

// A model's `layers` as Keras lists them: Sequential without its InputLayer, Functional with its
// InputLayers, each layer once.
std::vector<std::shared_ptr<Layer>> saveable_layers(const Model& model) {
  std::vector<std::shared_ptr<Layer>> out;
  std::set<const Layer*> seen;
  for (const auto& l : model.layers()) {
    if (seen.insert(l.get()).second) out.push_back(l);
  }
  return out;
}

void collect_groups(const Layer& layer, const std::string& path, std::vector<VarGroup>& out) {
  if (const auto* model = dynamic_cast<const Model*>(&layer)) {
    out.push_back({path, model->name(), {}});
    std::map<std::string, int> used;
    for (const auto& l : saveable_layers(*model)) {
      collect_groups(*l, join(path, "layers/" + unique_name(to_snake_case(l->class_name()), used)),
                     out);
    }
    return;
  }
  if (const auto* mha = dynamic_cast<const layers::MultiHeadAttention*>(&layer)) {
    // Keras' MultiHeadAttention keeps its weights in four EinsumDense sublayers.
    out.push_back({path, mha->name(), {}});
    auto dense = [&](const char* attr, const char* name, const Variable& k, const Variable& b) {
      std::vector<Variable> vars{k};
      if (b.defined()) vars.push_back(b);
      out.push_back({join(path, attr), name, vars});
    };
    dense("_query_dense", "query", mha->query_kernel(), mha->query_bias());
    dense("_key_dense", "key", mha->key_kernel(), mha->key_bias());
    dense("_value_dense", "value", mha->value_kernel(), mha->value_bias());
    dense("_output_dense", "attention_output", mha->output_kernel(), mha->output_bias());
    return;
  }
  out.push_back({path, layer.name(), layer.weights()});
}

std::string date_saved() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d@%H:%M:%S", &tm);
  return buf;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw NotFound("load_model: cannot open '" + path + "'.");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void save_model(const Model& model, const std::string& path) {
  LOCKSTEP_CHECK(ends_with(path, ".keras"),
                 "save_model: expected a path ending in '.keras'. "
                 "Received: '",
                 path, "'. (Use save_weights for a weights file.)");
  const std::string config = serialize_model(model).dump();
  const std::string metadata =
      json{{"keras_version", "3.16.0"}, {"date_saved", date_saved()}}.dump();

  H5Writer h5;
  std::vector<VarGroup> groups;
  collect_groups(model, "", groups);
  if (model.compiled()) {
    const optimizers::Optimizer& opt = model.optimizer();
    groups.push_back({"optimizer", opt.name(), opt.variables()});
  }
  for (const VarGroup& g : groups) {
    h5.make_vars(g.path, g.name);
    for (size_t i = 0; i < g.vars.size(); ++i)
      h5.write(g.path, static_cast<int>(i), g.vars[i].raw_value());
  }
  const std::string weights = h5.finish();
  const std::string archive =
      write_zip({{kMetadata, metadata}, {kConfig, config}, {kWeights, weights}});
  AtomicFileWriter out(path, "save_model");
  out.write(archive.data(), archive.size());
  out.commit();
}

std::shared_ptr<Model> load_model(const std::string& path, bool compile) {
  return load_model_from_bytes(read_file(path), path, compile);
}

std::shared_ptr<Model> load_model_from_bytes(std::string bytes, const std::string& origin,
                                             bool compile) {
  ZipReader zip(std::move(bytes), origin);
  const std::string config_origin = origin + "/" + kConfig;
  json config;
  try {
    config = json::parse(zip.read(kConfig, kMaxJsonBytes));
  } catch (const json::exception& e) {
    throw DataLoss("'" + config_origin + "' is not JSON: " + e.what());
  }
  std::shared_ptr<Model> model;
  try {
    model = deserialize_model(config, compile);
  } catch (const Error& e) {
    throw InvalidArgument("'" + config_origin + "': " + e.what());
  } catch (const json::exception& e) {
    throw InvalidArgument("'" + config_origin + "': " + e.what());
  }

  const std::string weights_origin = origin + "/" + kWeights;
  H5Reader h5(zip.read(kWeights), weights_origin);
  std::vector<VarGroup> groups;
  collect_groups(*model, "", groups);
  if (model->compiled() && h5.has_vars("optimizer")) {
    optimizers::Optimizer& opt = model->optimizer();
    // A model saved before its first step has the optimizer's iterations and learning rate only
    // (Keras writes those for an unbuilt optimizer); otherwise the slots exist once the optimizer
    // is built for the trainable weights, as fit builds it.
    std::vector<Variable> unbuilt = opt.variables();
    if (opt.built() || h5.count("optimizer") != static_cast<int>(unbuilt.size())) {
      opt.build(model->trainable_weights());
    }
    groups.push_back({"optimizer", opt.name(), opt.variables()});
  }
  // Read and check everything before assigning anything: a bad file leaves the model untouched.
  std::vector<std::pair<Variable, Tensor>> assignments;
  for (const VarGroup& g : groups) {
    if (g.vars.empty()) continue;
    const std::string where =
        "'" + weights_origin + "', group '" + vars_group(g.path) + "' ('" + g.name + "')";
    if (!h5.has_vars(g.path)) {
      throw NotFound(where + " is missing: the file holds no weights for it.");
    }
    const int n = h5.count(g.path);
    if (n != static_cast<int>(g.vars.size())) {
      throw InvalidArgument(where + " holds " + std::to_string(n) + " variables; the config's '" +
                            g.name + "' has " + std::to_string(g.vars.size()) + ".");
    }
    const bool optimizer = g.path == "optimizer";
    for (int i = 0; i < n; ++i) {
      const Variable& v = g.vars[static_cast<size_t>(i)];
      Tensor t = h5.read(g.path, i);
      // Keras keeps the learning rate in float32; Lockstep's counters and rate are float64/int64.
      if (optimizer && t.shape() == v.shape() && t.dtype() != v.dtype() && t.rank() == 0) {
        t = t.to(v.dtype());
      }
      if (t.shape() != v.shape() || t.dtype() != v.dtype()) {
        throw InvalidArgument("'" + weights_origin + "', entry '" + vars_group(g.path) + "/" +
                              std::to_string(i) + "' is " + t.describe() + ", but '" + v.name() +
                              "' is " + v.raw_value().describe() +
                              ": the weights do not fit the config.");
      }
      assignments.emplace_back(v, std::move(t));
    }
  }
  for (auto& [v, t] : assignments) v.assign(t);
  return model;
}

}  // namespace lockstep::keras::saving
