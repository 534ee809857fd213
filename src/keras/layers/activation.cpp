#include "lockstep/keras/layers/activation.h"

#include <nlohmann/json.hpp>

#include "lockstep/keras/activations.h"

namespace lockstep::keras::layers {

Activation::Activation(const std::string& activation, const std::string& name)
    : LayerImpl(name, "activation"), activation_(activation) {
  activations::get(activation_);
}

Tensor Activation::call(const Tensor& inputs, bool) {
  return activations::get(activation_)(inputs);
}

nlohmann::json Activation::get_config() const {
  auto c = Layer::get_config();
  c["activation"] = activation_;
  return c;
}

}  // namespace lockstep::keras::layers
