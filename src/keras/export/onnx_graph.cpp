#include "onnx_graph.h"

#include <cstring>

namespace lockstep::keras::onnx_export {

std::string GraphBuilder::fresh(const std::string& hint) {
  return hint + "_" + std::to_string(counter_++);
}

std::string GraphBuilder::node(const std::string& op, const std::vector<std::string>& inputs,
                               const std::string& hint, onnx::NodeProto** out) {
  onnx::NodeProto* n = graph_->add_node();
  n->set_op_type(op);
  n->set_name(fresh(hint + "/" + op));
  for (const std::string& i : inputs) n->add_input(i);
  const std::string output = fresh(hint + "/" + op + ":0");
  n->add_output(output);
  if (out) *out = n;
  return output;
}

std::string GraphBuilder::constant_f32(const std::vector<float>& values,
                                       const std::vector<int64_t>& dims, const std::string& hint) {
  onnx::TensorProto* t = graph_->add_initializer();
  const std::string name = fresh(hint);
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  t->set_raw_data(
      std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  return name;
}

std::string GraphBuilder::constant(const Tensor& value, const std::string& hint) {
  const Tensor f = value.dtype() == DType::float32 ? value : value.to(DType::float32);
  const float* p = f.data<float>();
  return constant_f32(std::vector<float>(p, p + f.num_elements()), f.shape().to_vector(), hint);
}

std::string GraphBuilder::constant_i64(const std::vector<int64_t>& values,
                                       const std::string& hint) {
  onnx::TensorProto* t = graph_->add_initializer();
  const std::string name = fresh(hint);
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(values.size()));
  t->set_raw_data(
      std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t)));
  return name;
}

void GraphBuilder::set_ints(onnx::NodeProto* n, const std::string& name,
                            const std::vector<int64_t>& values) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values) a->add_ints(v);
}

void GraphBuilder::set_int(onnx::NodeProto* n, const std::string& name, int64_t value) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(value);
}

void GraphBuilder::set_float(onnx::NodeProto* n, const std::string& name, float value) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(value);
}

}  // namespace lockstep::keras::onnx_export
