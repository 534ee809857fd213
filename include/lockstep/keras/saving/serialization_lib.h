#pragma once
// Keras 3's serialization of objects to JSON (keras.saving.serialize_keras_object and
// deserialize_keras_object). An object becomes
//
//   {"module": "keras.layers", "class_name": "Dense", "config": {...get_config()...},
//    "registered_name": null, "build_config": {"input_shape": [null, 784]}}
//
//   module           "keras.layers", "keras.losses", "keras.metrics", "keras.optimizers",
//                    "keras.optimizers.schedules", "keras" (Sequential), "keras.src.models.
//                    functional" (Functional), "keras_hub.layers" (PositionEmbedding); a user's
//                    class: "lockstep.custom"
//   registered_name  null for a built-in class; "<package>><name>" for a class registered with
//                    register_keras_serializable (object_registration.h); "Functional" for
//                    Functional, as Keras writes it
//   build_config     written by the model that holds the layer (it knows the input shapes)
//
// A layer's dtype policy is written as Keras 3's DTypePolicy object,
//   "dtype": {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "mixed_bfloat16"},
//             "registered_name": null}
// and read from that form or from a plain string ("float32"). InputLayer keeps a plain dtype
// string, and a batch dimension of null, as Keras writes them.
//
// Deserialization looks the class up in the registry and makes it from `config`; an unknown class
// throws InvalidArgument naming it and the registered classes' kind ("layer 'Foo' (module ...)").
#include <memory>
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
}
}  // namespace lockstep::keras

namespace lockstep::keras::saving {

nlohmann::json serialize_keras_object(const Layer& layer);
nlohmann::json serialize_keras_object(const losses::Loss& loss);
nlohmann::json serialize_keras_object(const metrics::Metric& metric);
nlohmann::json serialize_keras_object(const optimizers::Optimizer& optimizer);

std::shared_ptr<Layer> deserialize_layer(const nlohmann::json& serialized);
std::shared_ptr<losses::Loss> deserialize_loss(const nlohmann::json& serialized);
std::shared_ptr<metrics::Metric> deserialize_metric(const nlohmann::json& serialized);
std::shared_ptr<optimizers::Optimizer> deserialize_optimizer(const nlohmann::json& serialized);

// Keras 3's DTypePolicy object for a policy name, and the name back from that object or a string.
nlohmann::json serialize_dtype_policy(const std::string& policy_name);
std::string deserialize_dtype_policy(const nlohmann::json& dtype);

// The Keras class name of a built-in loss, metric or optimizer ("CategoricalCrossentropy").
std::string class_name_of(const losses::Loss& loss);
std::string class_name_of(const metrics::Metric& metric);
std::string class_name_of(const optimizers::Optimizer& optimizer);

}  // namespace lockstep::keras::saving
