#include "lockstep/keras/layers/convolutional.h"

#include <nlohmann/json.hpp>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/nn_functions.h"
#include "lockstep/core/check.h"
#include "lockstep/keras/activations.h"

namespace lockstep::keras::layers {

namespace {

std::string pair_string(const std::array<int64_t, 2>& p) {
  return "(" + std::to_string(p[0]) + ", " + std::to_string(p[1]) + ")";
}

void require_positive_pair(const std::string& layer, const std::string& what,
                           const std::array<int64_t, 2>& p) {
  LOCKSTEP_CHECK(p[0] > 0 && p[1] > 0, layer, ": expected ", what,
                 " > 0 in both dimensions. Received: ", what, "=", pair_string(p), ".");
}

void require_nhwc(const std::string& layer, const std::string& name, const Shape& s) {
  LOCKSTEP_CHECK(s.rank() == 4, layer, " '", name,
                 "' expects inputs of rank 4 ([batch, height, width, channels]). Received shape ",
                 s.to_string(), ".");
}

// [N, H, W, C] -> [N, OH, OW, channels] with TensorFlow's window rules; N may be 0 (symbolic).
Shape windowed_shape(std::string_view op, const Shape& s, const std::array<int64_t, 2>& window,
                     const std::array<int64_t, 2>& strides, ops::Padding padding,
                     int64_t channels) {
  int64_t oh = ops::window_geometry(op, s[1], window[0], strides[0], padding).out;
  int64_t ow = ops::window_geometry(op, s[2], window[1], strides[1], padding).out;
  return Shape{s[0], oh, ow, channels};
}

}  // namespace

Conv2D::Conv2D(Conv2DOptions options)
    : LayerImpl(options.name, "conv2d", options.dtype),
      options_(std::move(options)),
      padding_(ops::padding_from_name(options_.padding)) {
  LOCKSTEP_CHECK(options_.filters > 0,
                 "Conv2D: expected filters > 0. Received: filters=", options_.filters, ".");
  require_positive_pair("Conv2D", "kernel_size", options_.kernel_size);
  require_positive_pair("Conv2D", "strides", options_.strides);
  activations::get(options_.activation);
  initializers::get(options_.kernel_initializer);
  initializers::get(options_.bias_initializer);
}

ops::Conv2DOptions Conv2D::op_options() const {
  return {.strides = options_.strides, .padding = padding_};
}

void Conv2D::build(const Shape& input_shape) {
  require_nhwc("Conv2D", name(), input_shape);
  compute_output_shape(input_shape);  // rejects a kernel larger than a "valid" input now
  kernel_ = add_weight(
      "kernel",
      {options_.kernel_size[0], options_.kernel_size[1], input_shape[3], options_.filters},
      *initializers::get(options_.kernel_initializer), true, variable_dtype());
  if (options_.use_bias) {
    bias_ = add_weight("bias", {options_.filters}, *initializers::get(options_.bias_initializer),
                       true, variable_dtype());
  }
}

Tensor Conv2D::call(const Tensor& inputs, bool) {
  require_nhwc("Conv2D", name(), inputs.shape());
  LOCKSTEP_CHECK(inputs.dim(3) == kernel_.shape()[2], "Conv2D '", name(), "' expects inputs with ",
                 kernel_.shape()[2], " channels (kernel ", kernel_.shape(),
                 "). Received: ", inputs.describe(), ".");
  Tensor bias = options_.use_bias ? autocast(bias_) : Tensor();
  if (options_.activation == "relu") {
    return conv2d_relu(autocast(inputs), autocast(kernel_), bias, op_options());
  }
  Tensor y = conv2d(autocast(inputs), autocast(kernel_), bias, op_options());
  if (options_.activation == "linear") return y;
  // Keras keeps softmax in float32 under a bfloat16 compute dtype (probabilities feed the loss).
  if (options_.activation == "softmax" && y.dtype() == DType::bfloat16) {
    y = cast(y, DType::float32);
  }
  if (options_.activation == "softmax") keep_float32_output();
  return activations::get(options_.activation)(y);
}

Shape Conv2D::compute_output_shape(const Shape& input_shape) const {
  require_nhwc("Conv2D", name(), input_shape);
  return windowed_shape("Conv2D", input_shape, options_.kernel_size, options_.strides, padding_,
                        options_.filters);
}

nlohmann::json Conv2D::get_config() const {
  auto c = Layer::get_config();
  c["filters"] = options_.filters;
  c["kernel_size"] = options_.kernel_size;
  c["strides"] = options_.strides;
  c["padding"] = options_.padding;
  c["data_format"] = "channels_last";
  c["dilation_rate"] = std::array<int64_t, 2>{1, 1};
  c["groups"] = 1;
  c["activation"] = options_.activation;
  c["use_bias"] = options_.use_bias;
  c["kernel_initializer"] = options_.kernel_initializer;
  c["bias_initializer"] = options_.bias_initializer;
  c["dtype"] = dtype_policy().name();
  return c;
}

MaxPooling2D::MaxPooling2D(MaxPooling2DOptions options)
    : LayerImpl(options.name, "max_pooling2d", options.dtype),
      options_(std::move(options)),
      padding_(ops::padding_from_name(options_.padding)) {
  require_positive_pair("MaxPooling2D", "pool_size", options_.pool_size);
  if (options_.strides == std::array<int64_t, 2>{0, 0}) options_.strides = options_.pool_size;
  require_positive_pair("MaxPooling2D", "strides", options_.strides);
}

ops::Pool2DOptions MaxPooling2D::op_options() const {
  return {.pool_size = options_.pool_size, .strides = options_.strides, .padding = padding_};
}

Tensor MaxPooling2D::call(const Tensor& inputs, bool) {
  require_nhwc("MaxPooling2D", name(), inputs.shape());
  return max_pool2d(autocast(inputs), op_options());
}

Shape MaxPooling2D::compute_output_shape(const Shape& input_shape) const {
  require_nhwc("MaxPooling2D", name(), input_shape);
  return windowed_shape("MaxPooling2D", input_shape, options_.pool_size, options_.strides, padding_,
                        input_shape[3]);
}

nlohmann::json MaxPooling2D::get_config() const {
  auto c = Layer::get_config();
  c["pool_size"] = options_.pool_size;
  c["strides"] = options_.strides;
  c["padding"] = options_.padding;
  c["data_format"] = "channels_last";
  c["dtype"] = dtype_policy().name();
  return c;
}

}  // namespace lockstep::keras::layers
