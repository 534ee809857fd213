#pragma once
// Symbolic tensors of the functional API: `auto x = Input({784}); auto y = Dense(...)(x);`
// A KerasTensor knows its shape (batch dimension 0 = unknown, printed None), its dtype and the
// layer call that produces it; Model(inputs, outputs) walks these links.
#include <memory>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::keras {

class Layer;
struct KerasNode;

class KerasTensor {
 public:
  KerasTensor() = default;
  KerasTensor(Shape shape, DType dtype, std::shared_ptr<KerasNode> node)
      : shape_(shape), dtype_(dtype), node_(std::move(node)) {}
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  const std::shared_ptr<KerasNode>& node() const { return node_; }
  bool defined() const { return node_ != nullptr; }

 private:
  Shape shape_;
  DType dtype_ = DType::float32;
  std::shared_ptr<KerasNode> node_;
};

// One call of a layer in the graph.
struct KerasNode {
  std::shared_ptr<Layer> layer;
  std::vector<KerasTensor> inputs;  // empty for an InputLayer
};

// The nodes that `output` depends on, each after the nodes of its inputs (inputs first, `output`'s
// own node last), each once.
std::vector<std::shared_ptr<KerasNode>> topological_order(const KerasTensor& output);

// keras.Input: `shape` excludes the batch dimension.
KerasTensor Input(const Shape& shape, DType dtype = DType::float32, const std::string& name = "");

}  // namespace lockstep::keras
