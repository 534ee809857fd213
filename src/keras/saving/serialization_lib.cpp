#include "lockstep/keras/saving/serialization_lib.h"

#include <typeinfo>

#include <nlohmann/json.hpp>

#include "lockstep/core/error.h"
#include "lockstep/keras/layer.h"
#include "lockstep/keras/losses.h"
#include "lockstep/keras/metrics.h"
#include "lockstep/keras/optimizers.h"
#include "lockstep/keras/saving/object_registration.h"

namespace lockstep::keras::saving {

namespace {

using nlohmann::json;

std::string layer_module(const std::string& class_name) {
  if (class_name == "Sequential") return "keras";
  if (class_name == "Functional") return "keras.src.models.functional";
  if (class_name == "PositionEmbedding") return "keras_hub.layers";
  return "keras.layers";
}

template <typename Base>
json envelope(const std::string& module, const std::string& class_name, json config) {
  json registered = nullptr;
  std::string mod = module;
  if (!is_builtin<Base>(class_name)) {
    if (auto name = get_registered_name<Base>(class_name)) {
      registered = *name;
      mod = "lockstep.custom";
    }
  }
  return {{"module", mod},
          {"class_name", class_name},
          {"config", std::move(config)},
          {"registered_name", registered}};
}

// What a kind of object is called in errors.
template <typename Base>
const char* kind_name();
template <>
const char* kind_name<Layer>() {
  return "layer";
}
template <>
const char* kind_name<losses::Loss>() {
  return "loss";
}
template <>
const char* kind_name<metrics::Metric>() {
  return "metric";
}
template <>
const char* kind_name<optimizers::Optimizer>() {
  return "optimizer";
}

template <typename Base>
std::shared_ptr<Base> deserialize(const json& serialized) {
  if (serialized.is_string()) {
    // Keras accepts a bare class name or identifier ("adam", "categorical_crossentropy").
    return deserialize<Base>(json{{"class_name", serialized}, {"config", json::object()}});
  }
  if (!serialized.is_object() || !serialized.contains("class_name") ||
      !serialized["class_name"].is_string()) {
    throw InvalidArgument(
        std::string("deserialize: expected a serialized ") + kind_name<Base>() +
        " (an object with a string 'class_name'). Received: " + serialized.dump().substr(0, 200));
  }
  const std::string class_name = serialized["class_name"];
  std::optional<Factory<Base>> factory;
  if (serialized.contains("registered_name") && serialized["registered_name"].is_string()) {
    factory = get_registered_object<Base>(serialized["registered_name"]);
  }
  if (!factory) factory = get_registered_object<Base>(class_name);
  if (!factory) {
    throw InvalidArgument(std::string("deserialize: unknown ") + kind_name<Base>() + " class '" +
                          class_name + "' (module " + serialized.value("module", json()).dump() +
                          ", registered_name " +
                          serialized.value("registered_name", json()).dump() +
                          "). Register it with keras::saving::register_keras_serializable.");
  }
  json config = serialized.value("config", json::object());
  if (!config.is_object()) {
    throw InvalidArgument(std::string("deserialize: the config of ") + kind_name<Base>() + " '" +
                          class_name +
                          "' is not an object. Received: " + config.dump().substr(0, 200));
  }
  try {
    std::shared_ptr<Base> object = (*factory)(config);
    if (!object) throw InvalidArgument("its factory returned null");
    return object;
  } catch (const json::exception& e) {
    // A config missing a field or holding one of the wrong type.
    throw InvalidArgument(std::string("deserialize: bad config for ") + kind_name<Base>() + " '" +
                          class_name + "': " + e.what());
  }
}

}  // namespace

json serialize_dtype_policy(const std::string& policy_name) {
  return {{"module", "keras"},
          {"class_name", "DTypePolicy"},
          {"config", {{"name", policy_name}}},
          {"registered_name", nullptr}};
}

std::string deserialize_dtype_policy(const json& dtype) {
  if (dtype.is_string()) return dtype;
  if (dtype.is_null()) return "";
  if (dtype.is_object() && dtype.contains("config") && dtype["config"].contains("name") &&
      dtype["config"]["name"].is_string()) {
    return dtype["config"]["name"];
  }
  throw InvalidArgument(
      "deserialize: expected a dtype policy name or DTypePolicy object. Received: " +
      dtype.dump().substr(0, 200));
}

json serialize_keras_object(const Layer& layer) {
  json config = layer.get_config();
  const std::string cls = layer.class_name();
  if (cls == "InputLayer") {
    if (config.contains("batch_shape") && !config["batch_shape"].empty()) {
      config["batch_shape"][0] = nullptr;
    }
    config["sparse"] = false;
  } else if (cls != "Sequential" && cls != "Functional") {
    config["dtype"] = serialize_dtype_policy(layer.dtype_policy().name());
  }
  json out = envelope<Layer>(layer_module(cls), cls, std::move(config));
  if (cls == "Functional") out["registered_name"] = "Functional";
  return out;
}

json serialize_keras_object(const losses::Loss& loss) {
  return envelope<losses::Loss>("keras.losses", class_name_of(loss), loss.get_config());
}

json serialize_keras_object(const metrics::Metric& metric) {
  return envelope<metrics::Metric>("keras.metrics", class_name_of(metric), metric.get_config());
}

json serialize_keras_object(const optimizers::Optimizer& optimizer) {
  return envelope<optimizers::Optimizer>("keras.optimizers", class_name_of(optimizer),
                                         optimizer.get_config());
}

std::shared_ptr<Layer> deserialize_layer(const json& serialized) {
  return deserialize<Layer>(serialized);
}
std::shared_ptr<losses::Loss> deserialize_loss(const json& serialized) {
  return deserialize<losses::Loss>(serialized);
}
std::shared_ptr<metrics::Metric> deserialize_metric(const json& serialized) {
  return deserialize<metrics::Metric>(serialized);
}
std::shared_ptr<optimizers::Optimizer> deserialize_optimizer(const json& serialized) {
  return deserialize<optimizers::Optimizer>(serialized);
}

std::string class_name_of(const losses::Loss& loss) {
  const std::type_info& t = typeid(loss);
  if (t == typeid(losses::CategoricalCrossentropy)) return "CategoricalCrossentropy";
  if (t == typeid(losses::SparseCategoricalCrossentropy)) return "SparseCategoricalCrossentropy";
  if (t == typeid(losses::BinaryCrossentropy)) return "BinaryCrossentropy";
  if (t == typeid(losses::MeanSquaredError)) return "MeanSquaredError";
  if (t == typeid(losses::MeanAbsoluteError)) return "MeanAbsoluteError";
  // A user's loss: its name, as registered.
  return loss.name();
}

std::string class_name_of(const metrics::Metric& metric) {
  const std::type_info& t = typeid(metric);
  if (t == typeid(metrics::Accuracy)) return "Accuracy";
  if (t == typeid(metrics::BinaryAccuracy)) return "BinaryAccuracy";
  if (t == typeid(metrics::CategoricalAccuracy)) return "CategoricalAccuracy";
  if (t == typeid(metrics::SparseCategoricalAccuracy)) return "SparseCategoricalAccuracy";
  if (t == typeid(metrics::TopKCategoricalAccuracy)) return "TopKCategoricalAccuracy";
  if (t == typeid(metrics::SparseTopKCategoricalAccuracy)) return "SparseTopKCategoricalAccuracy";
  if (t == typeid(metrics::Mean)) return "Mean";
  return metric.name();
}

std::string class_name_of(const optimizers::Optimizer& optimizer) {
  const std::type_info& t = typeid(optimizer);
  if (t == typeid(optimizers::SGD)) return "SGD";
  if (t == typeid(optimizers::Adam)) return "Adam";
  if (t == typeid(optimizers::AdamW)) return "AdamW";
  if (t == typeid(optimizers::RMSprop)) return "RMSprop";
  if (t == typeid(optimizers::Adagrad)) return "Adagrad";
  return optimizer.name();
}

}  // namespace lockstep::keras::saving
