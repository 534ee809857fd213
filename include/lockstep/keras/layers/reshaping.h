#pragma once
// Reshaping layers (keras.layers.Flatten, keras.layers.Reshape): the same elements in a new shape,
// the batch dimension kept.
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/keras/layer.h"

namespace lockstep::keras::layers {

// [batch, d1, d2, ...] -> [batch, d1 * d2 * ...]
class Flatten : public LayerImpl<Flatten> {
 public:
  explicit Flatten(const std::string& name = "");
  std::string class_name() const override { return "Flatten"; }
  Tensor call(const Tensor& inputs, bool training) override;
  Shape compute_output_shape(const Shape& input_shape) const override;
};

// [batch, ...] -> [batch, target_shape...]; target_shape excludes the batch and may hold one -1.
class Reshape : public LayerImpl<Reshape> {
 public:
  explicit Reshape(std::vector<int64_t> target_shape, const std::string& name = "");
  std::string class_name() const override { return "Reshape"; }
  Tensor call(const Tensor& inputs, bool training) override;
  Shape compute_output_shape(const Shape& input_shape) const override;
  nlohmann::json get_config() const override;

 private:
  Shape resolve(const Shape& input_shape) const;
  std::vector<int64_t> target_;
};

}  // namespace lockstep::keras::layers
