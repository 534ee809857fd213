#pragma once
// GlobalAveragePooling1D (keras.layers.GlobalAveragePooling1D), channels_last:
//
//   x [B, steps, C] -> y [B, C] (keepdims: [B, 1, C]),   y[b, c] = Σ_t x[b, t, c] / steps
//
// Floating inputs take the layer's compute dtype (bfloat16 under mixed_bfloat16; the sum
// accumulates in float32). Not supported (Keras options): data_format="channels_first", masks.
#include <string>

#include "lockstep/keras/layer.h"

namespace lockstep::keras::layers {

struct GlobalAveragePooling1DOptions {
  bool keepdims = false;
  std::string dtype = "";  // the dtype policy ("" = global)
  std::string name = "";
};

class GlobalAveragePooling1D : public LayerImpl<GlobalAveragePooling1D> {
 public:
  explicit GlobalAveragePooling1D(GlobalAveragePooling1DOptions options = {});
  std::string class_name() const override { return "GlobalAveragePooling1D"; }
  Tensor call(const Tensor& inputs, bool training) override;
  Shape compute_output_shape(const Shape& input_shape) const override;
  nlohmann::json get_config() const override;

 private:
  GlobalAveragePooling1DOptions options_;
};

}  // namespace lockstep::keras::layers
