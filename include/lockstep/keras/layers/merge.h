#pragma once
// Merge layers: several inputs of one shape in, one tensor out.
//
//   Add          [x_1, ..., x_k] (same shape S, k >= 2) -> x_1 + ... + x_k, shape S
//   Concatenate  [x_1, ..., x_k] (equal except along `axis`) -> concat along `axis`
//
// Shapes must agree exactly (a batch dimension of 0 = unknown matches any); Keras' Add also
// broadcasts size-1 dimensions, which is not supported here.
#include <string>
#include <vector>

#include "lockstep/keras/layer.h"

namespace lockstep::keras::layers {

class Add : public LayerImpl<Add> {
 public:
  // `dtype`: the dtype policy ("" = global); floating inputs are cast to its compute dtype.
  explicit Add(const std::string& name = "", const std::string& dtype = "");
  std::string class_name() const override { return "Add"; }
  bool accepts_multiple_inputs() const override { return true; }
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const std::vector<Tensor>& inputs, bool training) override;
  std::vector<Shape> compute_output_shapes(const std::vector<Shape>& input_shapes) const override;
};

struct ConcatenateOptions {
  int axis = -1;  // negative counts from the end; the batch axis (0) cannot be concatenated
  std::string dtype = "";  // the dtype policy ("" = global); inputs take its compute dtype
  std::string name = "";
};

class Concatenate : public LayerImpl<Concatenate> {
 public:
  explicit Concatenate(ConcatenateOptions options = {});
  std::string class_name() const override { return "Concatenate"; }
  bool accepts_multiple_inputs() const override { return true; }
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const std::vector<Tensor>& inputs, bool training) override;
  std::vector<Shape> compute_output_shapes(const std::vector<Shape>& input_shapes) const override;
  nlohmann::json get_config() const override;

 private:
  ConcatenateOptions options_;
};

}  // namespace lockstep::keras::layers
