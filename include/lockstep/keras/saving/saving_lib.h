#pragma once
// Whole-model saving in Keras 3's `.keras` format (keras.src.saving.saving_lib):
//
//   a zip archive holding
//     config.json        serialize_model(model) (model_config.h): the architecture, each layer's
//                        config and dtype policy, build_config, and compile_config when compiled
//     metadata.json      {"keras_version": "3.16.0" (the Keras release whose format this follows),
//                         "date_saved": "%Y-%m-%d@%H:%M:%S" (UTC)}
//     model.weights.h5   the variables (h5_store.h), at Keras 3's paths:
//                          vars                                the model (no variables)
//                          layers/<key>/vars/<i>               a layer's i-th weight
//                          layers/<key>/layers/<key>/vars/<i>  a layer of a nested model
//                          layers/<key>/_query_dense/vars/<i>  MultiHeadAttention's projections
//                            (_query_dense, _key_dense, _value_dense, _output_dense: kernel, bias)
//                          optimizer/vars/<i>                  iterations, learning_rate (when
//                                                              constant), then each trainable
//                                                              variable's slots, variable by
//                                                              variable
//                        <key> is the snake_case class name made unique within its list
//                        ("dense", "dense_1", ...), as Keras names containers' children — not
//                        the layer's name, which Keras does not reproduce from run to run.
//
// save_model writes atomically (core/atomic_file.h): the file is complete or untouched.
// load_model rebuilds the model from config.json through the registry (object_registration.h),
// compiles it from compile_config (when present and `compile`), assigns every weight, and, when
// compiled and the file has optimizer variables, builds the optimizer for the trainable weights
// and restores its state — so that fit continues as the saved run would have.
// Every bad input is an exception naming the file and the entry: DataLoss for a file that is not
// a zip or is truncated, NotFound for a missing entry, group or dataset, InvalidArgument for a
// config naming an unknown class or weights that do not fit it.
#include <memory>
#include <string>

namespace lockstep::keras {
class Model;
}

namespace lockstep::keras::saving {

void save_model(const Model& model, const std::string& path);
std::shared_ptr<Model> load_model(const std::string& path, bool compile = true);
// load_model from the archive's bytes; `origin` names it in errors (fuzzers and tests).
std::shared_ptr<Model> load_model_from_bytes(std::string bytes, const std::string& origin,
                                             bool compile = true);

}  // namespace lockstep::keras::saving
