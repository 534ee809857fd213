#pragma once
// InputLayer (keras.layers.InputLayer): the source of a functional graph, made by keras::Input.
#include <string>

#include "lockstep/keras/keras_tensor.h"
#include "lockstep/keras/layer.h"

namespace lockstep::keras::layers {

// The source of a functional graph (created by keras::Input).
class InputLayer : public LayerImpl<InputLayer> {
 public:
  InputLayer(const Shape& shape, DType dtype = DType::float32, const std::string& name = "");
  std::string class_name() const override { return "InputLayer"; }
  Tensor call(const Tensor& inputs, bool training) override;
  Shape compute_output_shape(const Shape&) const override { return batch_shape_; }
  nlohmann::json get_config() const override;
  // Shape with batch dimension 0 (unknown).
  const Shape& batch_shape() const { return batch_shape_; }
  DType dtype() const { return dtype_; }

 private:
  Shape batch_shape_;
  DType dtype_;
};

}  // namespace lockstep::keras::layers
