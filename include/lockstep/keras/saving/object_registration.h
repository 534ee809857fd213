#pragma once
// The registry of serializable classes (keras.saving.register_keras_serializable and
// get_registered_object): how a config names a class and how the class is made from its config.
//
// A serialized object (serialization_lib.h) names its class by `class_name` and, for a class
// registered by a user, by `registered_name` = "<package>>" + "<name>" ("my_package>MyLayer").
// Lookup tries `registered_name` first, then `class_name`, as Keras 3's deserialize_keras_object.
// The built-in layers, losses, metrics, optimizers and learning-rate schedules are registered
// under their Keras class names ("Dense", "Adam", "CosineDecay", ...) before the first lookup.
//
// A user's layer registers a factory from its config (the object `get_config()` returns):
//
//   class MyLayer : public keras::LayerImpl<MyLayer> { ... nlohmann::json get_config() const ... };
//   keras::saving::register_keras_serializable<keras::Layer>(
//       "my_package", "MyLayer",
//       [](const nlohmann::json& config) { return std::make_shared<MyLayer>(...config...); });
//
// and its class_name() must return "MyLayer" so that saving writes the registered name.
// Registration is process-wide (as in Keras) and thread-safe; registering a name twice replaces
// the factory.
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace lockstep::keras {
class Layer;
namespace losses {
class Loss;
}
namespace metrics {
class Metric;
}
namespace optimizers {
class Optimizer;
namespace schedules {
class LearningRateSchedule;
}
}  // namespace optimizers
}  // namespace lockstep::keras

namespace lockstep::keras::saving {

// Makes an object from the `config` member of its serialized form.
template <typename Base>
using Factory = std::function<std::shared_ptr<Base>(const nlohmann::json& config)>;

// The kinds of object a config may hold; each has its own name space, as in Keras a layer and a
// loss may share a name.
template <typename Base>
void register_object(const std::string& registered_name, Factory<Base> factory);
// The factory registered under `name`, if any.
template <typename Base>
std::optional<Factory<Base>> get_registered_object(const std::string& name);

// Keras' get_registered_name for a user class: "<package>><name>".
std::string registered_name(const std::string& package, const std::string& name);

// keras.saving.register_keras_serializable(package, name): registers `factory` under
// "<package>><name>" and, so that configs written without a registered_name load too, under
// `name` unless a built-in class already has it.
template <typename Base>
void register_keras_serializable(const std::string& package, const std::string& name,
                                 Factory<Base> factory);

// The registered name ("package>name") of a class a user registered, else nullopt (built-in
// classes are written with registered_name null, as Keras writes them).
template <typename Base>
std::optional<std::string> get_registered_name(const std::string& class_name);

// Whether `name` is a built-in class (written with registered_name null).
template <typename Base>
bool is_builtin(const std::string& class_name);

// Instantiated for Layer, losses::Loss, metrics::Metric, optimizers::Optimizer and
// optimizers::schedules::LearningRateSchedule.

}  // namespace lockstep::keras::saving
