#pragma once
// The Keras conformance harness: every layer goes through the same checks, as Keras'
// layer_test does.
//
//   1. output shape: the eager output has compute_output_shapes' shape (odd-sized inputs), and the
//      symbolic shape (batch 0) agrees except for the batch;
//   2. weight count: count_params and the number of weights equal numbers written in the case;
//   3. config round trip: get_config holds the constructor options, and a second layer built from
//      the same options reports the same config (names aside);
//   4. float64 gradients of the outputs w.r.t. the inputs and every trainable weight, through the
//      layer's own call(), with the project's one gradient checker
//      (tests/testing/gradient_check.h);
//   5. one SGD step on a fixed batch lowers an MSE loss (layers with trainable weights).
//
// For (4) the checker perturbs float64 copies of the weights; call_with_weights assigns a copy to
// its variable and records an identity op copy -> variable value on the tape, so the tape's
// gradient w.r.t. the copy is exactly the gradient w.r.t. the variable inside call().
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/keras/layer.h"

namespace lockstep::keras::conformance {

struct LayerCase {
  std::string name;  // the test parameter's name
  // A fresh layer from fixed options; layers with a dtype policy option get the policy that
  // computes (and keeps variables) in `dtype`: "float64" for the gradient check. Layers without
  // the option (Activation, Flatten, Reshape, Dropout) compute in their inputs' dtype.
  std::function<std::shared_ptr<Layer>(DType dtype)> make;
  std::vector<Shape> input_shapes;  // with the batch dimension; odd sizes
  int64_t id_vocab = 0;             // > 0: the input is int64 ids in [0, id_vocab)
  int64_t expected_params = 0;
  size_t expected_weights = 0;            // trainable + non-trainable variables
  size_t expected_trainable_weights = 0;  //
  nlohmann::json expected_config;         // keys the config must hold, with these values
  bool training = false;                  // the mode call() runs in
  // Build a new layer for every evaluation (Dropout's training mask comes from a stream that
  // advances per call: a fresh layer with the same seed draws the same mask each time).
  bool fresh_layer_per_call = false;
};

// Calls `layer` (built) with its `weights` set to `weight_values`, differentiably w.r.t. them.
inline Tensor call_with_weights(Layer& layer, const std::vector<Variable>& weights,
                                const std::vector<Tensor>& weight_values,
                                const std::vector<Tensor>& inputs, bool training) {
  for (size_t k = 0; k < weights.size(); ++k) {
    weights[k].assign(weight_values[k]);
    const Tensor& value = weights[k].raw_value();
    autodiff::record("conformance_bind_weight", {weight_values[k]}, {value},
                     [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  }
  return inputs.size() == 1 ? layer(inputs[0], training) : layer(inputs, training);
}

}  // namespace lockstep::keras::conformance
