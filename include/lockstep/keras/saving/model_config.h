#pragma once
// Keras 3's configs of Sequential and Functional models, and a whole model as JSON
// (Model::to_json / keras.models.model_from_json).
//
// Functional (keras.src.models.functional.Functional.get_config):
//   {"name": "vit", "trainable": true,
//    "layers": [{...serialize_keras_object(layer)..., "name": "dense",
//                "inbound_nodes": [{"args": [<tensor>], "kwargs": {}}]}, ...],
//    "input_layers": ["input_layer", 0, 0],            (a list of these for several inputs)
//    "output_layers": ["dense", 0, 0]}
//   <tensor> = {"class_name": "__keras_tensor__",
//               "config": {"shape": [null, 64], "dtype": "float32",
//                          "keras_history": [<layer name>, <node index>, 0]}}
//   A layer called on several tensors has args [[<tensor>, <tensor>, ...]]. Node indices count the
//   calls of a layer within the model; a nested Functional model's count starts at 1 (its own
//   graph is its node 0, as Keras counts). Each layer's build_config holds the input shape(s) of
//   its first call.
// Sequential (keras.src.models.sequential.Sequential.get_config):
//   {"name": "sequential", "trainable": true, "dtype": <DTypePolicy>,
//    "layers": [<InputLayer>, <layer>, ...], "build_input_shape": [null, 784]}
// A whole model (config.json of a .keras archive, Model::to_json):
//   serialize_keras_object(model) + "build_config": {"input_shape": ...} + "compile_config":
//   {"optimizer", "loss", "loss_weights", "metrics", "weighted_metrics", "run_eagerly",
//    "steps_per_execution", "jit_compile"} when the model is compiled.
//
// Reading accepts what Keras 3 writes for the same layers (also keyword tensors "query", "value",
// "key" of MultiHeadAttention, and Keras 2's [[name, node, tensor, {}]] inbound nodes). Errors are
// InvalidArgument naming the model and the layer or entry at fault.
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace lockstep::keras {
class Model;
class Sequential;
}  // namespace lockstep::keras

namespace lockstep::keras::saving {

nlohmann::json functional_config(const Model& model);
nlohmann::json sequential_config(const Sequential& model);
std::shared_ptr<Model> functional_from_config(const nlohmann::json& config);
std::shared_ptr<Sequential> sequential_from_config(const nlohmann::json& config);

// The whole model's serialized form, with build_config and (when compiled) compile_config.
nlohmann::json serialize_model(const Model& model);
// The inverse; compiles the model from compile_config when `compile` and the config has one.
std::shared_ptr<Model> deserialize_model(const nlohmann::json& serialized, bool compile = true);

}  // namespace lockstep::keras::saving

namespace lockstep::keras::models {

// keras.models.model_from_json: a model (uncompiled weights freshly initialized) from
// Model::to_json's text. Throws InvalidArgument for text that is not JSON or not a model config.
std::shared_ptr<Model> model_from_json(const std::string& json_text);

}  // namespace lockstep::keras::models
