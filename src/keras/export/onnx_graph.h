#pragma once
// GraphBuilder: appends nodes and float32 initializers to an ONNX GraphProto with fresh names.
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::keras::onnx_export {

class GraphBuilder {
 public:
  explicit GraphBuilder(onnx::GraphProto* graph) : graph_(graph) {}

  // A node `op` on `inputs`; returns its (one) output's name. `hint` names the node.
  std::string node(const std::string& op, const std::vector<std::string>& inputs,
                   const std::string& hint, onnx::NodeProto** out = nullptr);
  // Initializers: a float32 tensor (converted from the variable's dtype), int64 values.
  std::string constant(const Tensor& value, const std::string& hint);
  std::string constant_f32(const std::vector<float>& values, const std::vector<int64_t>& dims,
                           const std::string& hint);
  std::string constant_i64(const std::vector<int64_t>& values, const std::string& hint);

  static void set_ints(onnx::NodeProto* n, const std::string& name,
                       const std::vector<int64_t>& values);
  static void set_int(onnx::NodeProto* n, const std::string& name, int64_t value);
  static void set_float(onnx::NodeProto* n, const std::string& name, float value);

  std::string fresh(const std::string& hint);

 private:
  onnx::GraphProto* graph_;
  int counter_ = 0;
};

}  // namespace lockstep::keras::onnx_export
