#pragma once
// Activation (keras.layers.Activation): an activation function, by its Keras name, as a layer.
#include <string>

#include "lockstep/keras/layer.h"

namespace lockstep::keras::layers {

class Activation : public LayerImpl<Activation> {
 public:
  explicit Activation(const std::string& activation, const std::string& name = "");
  std::string class_name() const override { return "Activation"; }
  Tensor call(const Tensor& inputs, bool training) override;
  nlohmann::json get_config() const override;

 private:
  std::string activation_;
};

}  // namespace lockstep::keras::layers
