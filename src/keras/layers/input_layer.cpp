#include "lockstep/keras/layers/input_layer.h"
#include "lockstep/core/check.h"

#include <memory>
#include <nlohmann/json.hpp>

namespace lockstep::keras {

KerasTensor Input(const Shape& shape, DType dtype, const std::string& name) {
  auto layer = std::make_shared<layers::InputLayer>(shape, dtype, name);
  layer->set_built();
  auto node = std::make_shared<KerasNode>(KerasNode{layer, {}});
  return KerasTensor(layer->batch_shape(), dtype, node);
}

namespace layers {

InputLayer::InputLayer(const Shape& shape, DType dtype, const std::string& name)
    : LayerImpl(name, "input_layer"), batch_shape_(shape.with_inserted(0, 0)), dtype_(dtype) {}

Tensor InputLayer::call(const Tensor& inputs, bool) {
  LOCKSTEP_CHECK(
      inputs.rank() == batch_shape_.rank() && inputs.shape().with_dim(0, 0) == batch_shape_,
      "Input '", name(), "' expects batches of shape ", batch_shape_,
      " (batch first; 0 = any). Received: ", inputs.describe(), ".");
  return inputs;
}

nlohmann::json InputLayer::get_config() const {
  auto c = Layer::get_config();
  c["batch_shape"] = batch_shape_.to_vector();
  c["dtype"] = std::string(dtype_name(dtype_));
  return c;
}

}  // namespace layers
}  // namespace lockstep::keras
