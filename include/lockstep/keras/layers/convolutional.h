#pragma once
// Convolution and pooling layers, channels_last (NHWC) as Keras' default data_format.
//
//   Conv2D      x [N, H, W, C_in] -> activation(conv2d(x, kernel) + bias) [N, OH, OW, filters]
//               kernel [KH, KW, C_in, filters] (Keras' layout), bias [filters]
//   MaxPooling2D x [N, H, W, C] -> [N, OH, OW, C], the max over each window
//
// OH, OW follow TensorFlow's padding rules (ops/nn_padding.h):
//   "valid": OH = floor((H - KH) / SH) + 1        "same": OH = ceil(H / SH)
// with the odd element of "same" padding placed after (bottom/right), as TensorFlow.
// Not supported (Keras options): data_format="channels_first", dilation_rate != 1, groups != 1,
// regularizers and constraints.
#include <array>
#include <cstdint>
#include <string>

#include "lockstep/keras/layer.h"
#include "lockstep/ops/nn_conv.h"
#include "lockstep/ops/nn_pool.h"

namespace lockstep::keras::layers {

struct Conv2DOptions {
  int64_t filters = 0;
  std::array<int64_t, 2> kernel_size{0, 0};  // {height, width}
  std::array<int64_t, 2> strides{1, 1};      // {height, width}
  std::string padding = "valid";             // "valid" or "same"
  std::string activation = "linear";
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  // The layer's dtype policy (Keras' dtype argument: "float32", "mixed_bfloat16", "bfloat16",
  // "float64"); empty takes the global policy. Variables have the policy's variable dtype;
  // inputs, kernel and bias are cast to its compute dtype (under mixed_bfloat16 the convolution
  // runs in bfloat16 and the float32 variables receive float32 gradients).
  std::string dtype = "";
  std::string name = "";
};

class Conv2D : public LayerImpl<Conv2D> {
 public:
  explicit Conv2D(Conv2DOptions options);
  std::string class_name() const override { return "Conv2D"; }
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& inputs, bool training) override;
  Shape compute_output_shape(const Shape& input_shape) const override;
  nlohmann::json get_config() const override;
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }

 private:
  ops::Conv2DOptions op_options() const;
  Conv2DOptions options_;
  ops::Padding padding_;
  Variable kernel_, bias_;
};

struct MaxPooling2DOptions {
  std::array<int64_t, 2> pool_size{2, 2};  // {height, width}
  // {0, 0} means "equal to pool_size" (Keras' strides=None); get_config reports the resolved value.
  std::array<int64_t, 2> strides{0, 0};
  std::string padding = "valid";
  std::string dtype = "";  // the policy (no variables: inputs are cast to its compute dtype)
  std::string name = "";
};

// Gradients flow to the window's maximum only (the first one on ties, as TensorFlow).
class MaxPooling2D : public LayerImpl<MaxPooling2D> {
 public:
  explicit MaxPooling2D(MaxPooling2DOptions options = {});
  std::string class_name() const override { return "MaxPooling2D"; }
  Tensor call(const Tensor& inputs, bool training) override;
  Shape compute_output_shape(const Shape& input_shape) const override;
  nlohmann::json get_config() const override;

 private:
  ops::Pool2DOptions op_options() const;
  MaxPooling2DOptions options_;
  ops::Padding padding_;
};

}  // namespace lockstep::keras::layers
