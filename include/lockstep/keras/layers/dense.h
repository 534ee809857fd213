#pragma once
// Dense (keras.layers.Dense): the densely connected layer.
#include <cstdint>
#include <string>

#include "lockstep/keras/layer.h"
#include "lockstep/ops/linear.h"

namespace lockstep::keras::layers {

struct DenseOptions {
  int64_t units = 0;
  std::string activation = "linear";
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  std::string name = "";
  // Mixed precision policy name ("float32", "mixed_bfloat16", "bfloat16"); empty takes the
  // global policy. Keras' idiom: the output layer of a mixed model gets dtype = "float32".
  std::string dtype = "";
};

// y = activation(x · kernel + bias); kernel [in, units], bias [units]. x may have rank > 2: the
// kernel applies to the last axis. relu/sigmoid/tanh/gelu are fused into the matmul.
// Under a bfloat16 compute policy, floating inputs and the (float32) weights are cast to bfloat16
// for the matmul and the output is bfloat16, except softmax, which runs on float32 logits and
// returns float32 (probabilities feed the loss, where bfloat16's 8-bit mantissa would show).
class Dense : public LayerImpl<Dense> {
 public:
  explicit Dense(DenseOptions options);
  std::string class_name() const override { return "Dense"; }
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& inputs, bool training) override;
  bool reads_input_transposed() const override;
  Shape compute_output_shape(const Shape& input_shape) const override;
  nlohmann::json get_config() const override;
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }

 private:
  // x·kernel + bias with the fused activation, on the weights as the policy multiplies them.
  Tensor float32_form_linear(const Tensor& x, ops::FusedActivation kind);
  Tensor bfloat16_or_float32_linear(const Tensor& x, ops::FusedActivation kind);
  DenseOptions options_;
  Variable kernel_, bias_;
};

}  // namespace lockstep::keras::layers
