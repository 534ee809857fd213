#include "lockstep/keras/layers/global_pooling.h"

#include <nlohmann/json.hpp>

#include "lockstep/autodiff/functions.h"

namespace lockstep::keras::layers {

GlobalAveragePooling1D::GlobalAveragePooling1D(GlobalAveragePooling1DOptions options)
    : LayerImpl(options.name, "global_average_pooling1d", options.dtype),
      options_(std::move(options)) {}

Shape GlobalAveragePooling1D::compute_output_shape(const Shape& input_shape) const {
  if (input_shape.rank() != 3) {
    throw InvalidArgument("GlobalAveragePooling1D '" + name() +
                          "' expects inputs of rank 3 ([batch, steps, channels]). Received "
                          "shape " +
                          input_shape.to_string() + ".");
  }
  return options_.keepdims ? input_shape.with_dim(1, 1) : Shape{input_shape[0], input_shape[2]};
}

Tensor GlobalAveragePooling1D::call(const Tensor& inputs, bool) {
  compute_output_shape(inputs.shape());
  return reduce_mean(autocast(inputs), {1}, options_.keepdims);
}

nlohmann::json GlobalAveragePooling1D::get_config() const {
  auto c = Layer::get_config();
  c["data_format"] = "channels_last";
  c["keepdims"] = options_.keepdims;
  c["dtype"] = dtype_policy().name();
  return c;
}

}  // namespace lockstep::keras::layers
