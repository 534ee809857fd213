#include "lockstep/keras/export/onnx.h"

#include <cmath>
#include <functional>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "lockstep/core/atomic_file.h"
#include "lockstep/core/error.h"
#include "lockstep/keras/layers.h"
#include "lockstep/keras/model.h"
#include "onnx_graph.h"

namespace lockstep::keras {

namespace {

using nlohmann::json;
using onnx_export::GraphBuilder;

[[noreturn]] void unsupported(const Layer& layer, const std::string& why) {
  throw InvalidArgument("export_onnx: layer '" + layer.name() + "' (" + layer.class_name() +
                        ") has no ONNX export: " + why + ".");
}

class Exporter {
 public:
  explicit Exporter(GraphBuilder& g) : g_(g) {}

  // The graph of `model` with its inputs bound to `inputs`; returns the output's name.
  std::string model(const Model& m, const std::vector<std::string>& inputs) {
    const std::vector<KerasTensor> ins = m.inputs();
    LOCKSTEP_CHECK(m.output().defined() && ins.size() == inputs.size(), "export_onnx: model '",
                   m.name(), "' is not built or takes ", ins.size(), " inputs.");
    std::map<const KerasNode*, std::string> values;
    for (size_t i = 0; i < ins.size(); ++i) values[ins[i].node().get()] = inputs[i];
    for (const auto& n : topological_order(m.output())) {
      if (n->inputs.empty()) continue;
      std::vector<std::string> args;
      for (const KerasTensor& t : n->inputs) args.push_back(values.at(t.node().get()));
      values[n.get()] = layer(*n->layer, args, n->inputs);
    }
    return values.at(m.output().node().get());
  }

 private:
  std::string layer(const Layer& l, const std::vector<std::string>& in,
                    const std::vector<KerasTensor>& tensors) {
    std::vector<Shape> shapes;
    for (const KerasTensor& t : tensors) shapes.push_back(t.shape());
    const std::string cls = l.class_name();
    const std::string& name = l.name();
    if (const auto* m = dynamic_cast<const Model*>(&l)) return model(*m, in);
    const json c = l.get_config();
    auto one = [&] {
      if (in.size() != 1) unsupported(l, "expected one input, got " + std::to_string(in.size()));
      return in[0];
    };
    if (cls == "Dense") {
      const auto& d = static_cast<const layers::Dense&>(l);
      std::string y =
          g_.node("MatMul", {one(), g_.constant(d.kernel().raw_value(), name + "/kernel")}, name);
      if (c.value("use_bias", true)) {
        y = g_.node("Add", {y, g_.constant(d.bias().raw_value(), name + "/bias")}, name);
      }
      return activation(l, c.value("activation", std::string("linear")), y);
    }
    if (cls == "Activation") return activation(l, c.at("activation"), one());
    if (cls == "Dropout") return g_.node("Identity", {one()}, name);
    if (cls == "Flatten") {
      onnx::NodeProto* n;
      std::string y = g_.node("Flatten", {one()}, name, &n);
      GraphBuilder::set_int(n, "axis", 1);
      return y;
    }
    if (cls == "Reshape") {
      std::vector<int64_t> target = {0};
      for (int64_t d : c.at("target_shape").get<std::vector<int64_t>>()) target.push_back(d);
      return g_.node("Reshape", {one(), g_.constant_i64(target, name + "/shape")}, name);
    }
    if (cls == "Rescaling") {
      std::string x = one();
      if (!is_floating(tensors[0].dtype())) {
        onnx::NodeProto* n;
        x = g_.node("Cast", {x}, name, &n);
        GraphBuilder::set_int(n, "to", onnx::TensorProto::FLOAT);
      }
      x = g_.node("Mul",
                  {x, g_.constant_f32({static_cast<float>(c.at("scale").get<double>())}, {},
                                      name + "/scale")},
                  name);
      return g_.node(
          "Add",
          {x, g_.constant_f32({static_cast<float>(c.value("offset", 0.0))}, {}, name + "/offset")},
          name);
    }
    if (cls == "Conv2D") return conv(static_cast<const layers::Conv2D&>(l), c, one(), shapes[0]);
    if (cls == "MaxPooling2D") return max_pool(l, c, one(), shapes[0]);
    if (cls == "BatchNormalization")
      return batch_norm(static_cast<const layers::BatchNormalization&>(l), c, one());
    if (cls == "LayerNormalization") {
      const auto& ln = static_cast<const layers::LayerNormalization&>(l);
      const int64_t d = shapes[0][shapes[0].rank() - 1];
      std::string gamma = c.value("scale", true)
                              ? g_.constant(ln.gamma().raw_value(), name + "/gamma")
                              : g_.constant(Tensor::ones({d}), name + "/gamma");
      std::string beta = c.value("center", true)
                             ? g_.constant(ln.beta().raw_value(), name + "/beta")
                             : g_.constant(Tensor::zeros({d}), name + "/beta");
      onnx::NodeProto* n;
      std::string y = g_.node("LayerNormalization", {one(), gamma, beta}, name, &n);
      GraphBuilder::set_int(n, "axis", -1);
      GraphBuilder::set_float(n, "epsilon", static_cast<float>(c.value("epsilon", 1e-3)));
      return y;
    }
    if (cls == "Embedding") {
      const auto& e = static_cast<const layers::Embedding&>(l);
      onnx::NodeProto* n;
      std::string ids = g_.node("Cast", {one()}, name, &n);
      GraphBuilder::set_int(n, "to", onnx::TensorProto::INT64);
      return g_.node("Gather", {g_.constant(e.embeddings().raw_value(), name + "/embeddings"), ids},
                     name);
    }
    if (cls == "PositionEmbedding") {
      const auto& p = static_cast<const layers::PositionEmbedding&>(l);
      const int64_t t = shapes[0][1];
      Tensor table = p.embeddings().raw_value();
      Tensor rows = table.slice(0, t);
      std::string shape = g_.node("Shape", {one()}, name);
      return g_.node("Expand", {g_.constant(rows.clone(), name + "/embeddings"), shape}, name);
    }
    if (cls == "GlobalAveragePooling1D") {
      onnx::NodeProto* n;
      std::string y = g_.node("ReduceMean", {one()}, name, &n);
      GraphBuilder::set_ints(n, "axes", {1});
      GraphBuilder::set_int(n, "keepdims", c.value("keepdims", false) ? 1 : 0);
      return y;
    }
    if (cls == "Add") {
      std::string y = in.at(0);
      for (size_t i = 1; i < in.size(); ++i) y = g_.node("Add", {y, in[i]}, name);
      return y;
    }
    if (cls == "Concatenate") {
      onnx::NodeProto* n;
      std::string y = g_.node("Concat", in, name, &n);
      GraphBuilder::set_int(n, "axis", c.value("axis", -1));
      return y;
    }
    if (cls == "MultiHeadAttention") {
      return attention(static_cast<const layers::MultiHeadAttention&>(l), in, shapes);
    }
    unsupported(l, "only the built-in layers listed in lockstep/keras/export/onnx.h export");
  }

  std::string activation(const Layer& l, const std::string& a, const std::string& x) {
    const std::string& name = l.name();
    if (a == "linear" || a.empty()) return x;
    if (a == "relu") return g_.node("Relu", {x}, name);
    if (a == "sigmoid") return g_.node("Sigmoid", {x}, name);
    if (a == "tanh") return g_.node("Tanh", {x}, name);
    if (a == "softmax" || a == "log_softmax") {
      onnx::NodeProto* n;
      std::string y = g_.node(a == "softmax" ? "Softmax" : "LogSoftmax", {x}, name, &n);
      GraphBuilder::set_int(n, "axis", -1);
      return y;
    }
    if (a == "gelu") {
      // Opset 17 has no Gelu: the exact form 0.5·x·(1 + Erf(x/√2)).
      std::string e = g_.node(
          "Erf",
          {g_.node("Div",
                   {x, g_.constant_f32({static_cast<float>(std::sqrt(2.0))}, {}, name + "/sqrt2")},
                   name)},
          name);
      std::string one_plus = g_.node("Add", {e, g_.constant_f32({1.0f}, {}, name + "/one")}, name);
      std::string xm = g_.node("Mul", {x, one_plus}, name);
      return g_.node("Mul", {xm, g_.constant_f32({0.5f}, {}, name + "/half")}, name);
    }
    unsupported(l, "activation '" + a + "'");
  }

  std::string transpose(const std::string& x, const std::vector<int64_t>& perm,
                        const std::string& name) {
    onnx::NodeProto* n;
    std::string y = g_.node("Transpose", {x}, name, &n);
    GraphBuilder::set_ints(n, "perm", perm);
    return y;
  }

  // TensorFlow's padding along one axis: [before, after] (the odd element after, for "same").
  static std::pair<int64_t, int64_t> tf_pads(const std::string& padding, int64_t size, int64_t k,
                                             int64_t s) {
    if (padding != "same") return {0, 0};
    const int64_t out = (size + s - 1) / s;
    const int64_t total = std::max<int64_t>((out - 1) * s + k - size, 0);
    return {total / 2, total - total / 2};
  }

  std::string conv(const layers::Conv2D& l, const json& c, const std::string& x, const Shape& s) {
    const std::string& name = l.name();
    const auto k = c.at("kernel_size").get<std::array<int64_t, 2>>();
    const auto st = c.at("strides").get<std::array<int64_t, 2>>();
    const std::string padding = c.value("padding", std::string("valid"));
    // Keras' kernel [KH, KW, C_in, F] -> ONNX's [F, C_in, KH, KW].
    const Tensor kernel = l.kernel().raw_value().dtype() == DType::float32
                              ? l.kernel().raw_value()
                              : l.kernel().raw_value().to(DType::float32);
    const int64_t kh = kernel.shape()[0], kw = kernel.shape()[1], ci = kernel.shape()[2],
                  f = kernel.shape()[3];
    std::vector<float> w(static_cast<size_t>(kernel.num_elements()));
    const float* p = kernel.data<float>();
    for (int64_t a = 0; a < kh; ++a)
      for (int64_t b = 0; b < kw; ++b)
        for (int64_t i = 0; i < ci; ++i)
          for (int64_t o = 0; o < f; ++o)
            w[static_cast<size_t>(((o * ci + i) * kh + a) * kw + b)] =
                p[((a * kw + b) * ci + i) * f + o];
    std::vector<std::string> args = {transpose(x, {0, 3, 1, 2}, name),
                                     g_.constant_f32(w, {f, ci, kh, kw}, name + "/kernel")};
    if (c.value("use_bias", true))
      args.push_back(g_.constant(l.bias().raw_value(), name + "/bias"));
    const auto [top, bottom] = tf_pads(padding, s[1], k[0], st[0]);
    const auto [left, right] = tf_pads(padding, s[2], k[1], st[1]);
    onnx::NodeProto* n;
    std::string y = g_.node("Conv", args, name, &n);
    GraphBuilder::set_ints(n, "kernel_shape", {k[0], k[1]});
    GraphBuilder::set_ints(n, "strides", {st[0], st[1]});
    GraphBuilder::set_ints(n, "pads", {top, left, bottom, right});
    return activation(l, c.value("activation", std::string("linear")),
                      transpose(y, {0, 2, 3, 1}, name));
  }

  std::string max_pool(const Layer& l, const json& c, const std::string& x, const Shape& s) {
    const std::string& name = l.name();
    const auto k = c.at("pool_size").get<std::array<int64_t, 2>>();
    const auto st = c.at("strides").get<std::array<int64_t, 2>>();
    const std::string padding = c.value("padding", std::string("valid"));
    const auto [top, bottom] = tf_pads(padding, s[1], k[0], st[0]);
    const auto [left, right] = tf_pads(padding, s[2], k[1], st[1]);
    onnx::NodeProto* n;
    std::string y = g_.node("MaxPool", {transpose(x, {0, 3, 1, 2}, name)}, name, &n);
    GraphBuilder::set_ints(n, "kernel_shape", {k[0], k[1]});
    GraphBuilder::set_ints(n, "strides", {st[0], st[1]});
    GraphBuilder::set_ints(n, "pads", {top, left, bottom, right});
    return transpose(y, {0, 2, 3, 1}, name);
  }

  std::string batch_norm(const layers::BatchNormalization& l, const json& c, const std::string& x) {
    const std::string& name = l.name();
    const Tensor mean = l.moving_mean().raw_value().to(DType::float64);
    const Tensor var = l.moving_variance().raw_value().to(DType::float64);
    const int64_t n = mean.num_elements();
    const double eps = c.value("epsilon", 1e-3);
    std::vector<float> scale(static_cast<size_t>(n));
    const Tensor gamma = c.value("scale", true) ? l.gamma().raw_value().to(DType::float64)
                                                : Tensor::ones({n}, DType::float64);
    for (int64_t i = 0; i < n; ++i) {
      scale[static_cast<size_t>(i)] =
          static_cast<float>(gamma.data<double>()[i] / std::sqrt(var.data<double>()[i] + eps));
    }
    std::string y =
        g_.node("Sub", {x, g_.constant(l.moving_mean().raw_value(), name + "/moving_mean")}, name);
    y = g_.node("Mul", {y, g_.constant_f32(scale, {n}, name + "/scale")}, name);
    if (c.value("center", true))
      y = g_.node("Add", {y, g_.constant(l.beta().raw_value(), name + "/beta")}, name);
    return y;
  }

  // x [B, T, D] · kernel [D, H, K] + bias [H, K] -> [B, H, T, K] (or [B, H, K, T] when
  // `keys`, ready for the score product).
  std::string heads(const std::string& x, const Variable& kernel, const Variable& bias, bool keys,
                    const std::string& name) {
    const Shape ks = kernel.shape();
    const int64_t d = ks[0], h = ks[1], k = ks[2];
    std::string y = g_.node(
        "MatMul", {x, g_.constant(kernel.raw_value().reshape({d, h * k}), name + "/kernel")}, name);
    if (bias.defined())
      y = g_.node("Add", {y, g_.constant(bias.raw_value().reshape({h * k}), name + "/bias")}, name);
    y = g_.node("Reshape", {y, g_.constant_i64({0, -1, h, k}, name + "/shape")}, name);
    return transpose(y, keys ? std::vector<int64_t>{0, 2, 3, 1} : std::vector<int64_t>{0, 2, 1, 3},
                     name);
  }

  std::string attention(const layers::MultiHeadAttention& l, const std::vector<std::string>& in,
                        const std::vector<Shape>& shapes) {
    (void)shapes;
    if (in.size() > 3) unsupported(l, "an attention_mask input");
    const std::string& name = l.name();
    const std::string query = in[0], value = in.size() > 1 ? in[1] : in[0],
                      key = in.size() > 2 ? in[2] : value;
    std::string q = heads(query, l.query_kernel(), l.query_bias(), false, name + "/query");
    // Keras scales the query by 1/sqrt(key_dim) before the product with the keys.
    q = g_.node(
        "Mul",
        {q, g_.constant_f32({static_cast<float>(1.0 / std::sqrt(static_cast<double>(l.key_dim())))},
                            {}, name + "/scale")},
        name);
    std::string k = heads(key, l.key_kernel(), l.key_bias(), true, name + "/key");
    std::string v = heads(value, l.value_kernel(), l.value_bias(), false, name + "/value");
    onnx::NodeProto* n;
    std::string probs = g_.node("Softmax", {g_.node("MatMul", {q, k}, name)}, name, &n);
    GraphBuilder::set_int(n, "axis", -1);
    std::string o = transpose(g_.node("MatMul", {probs, v}, name), {0, 2, 1, 3}, name);
    const Shape ok = l.output_kernel().shape();  // [H, value_dim, E]
    o = g_.node("Reshape", {o, g_.constant_i64({0, -1, ok[0] * ok[1]}, name + "/shape")}, name);
    o = g_.node("MatMul",
                {o, g_.constant(l.output_kernel().raw_value().reshape({ok[0] * ok[1], ok[2]}),
                                name + "/attention_output/kernel")},
                name);
    if (l.output_bias().defined()) {
      o = g_.node("Add",
                  {o, g_.constant(l.output_bias().raw_value(), name + "/attention_output/bias")},
                  name);
    }
    return o;
  }

 private:
  GraphBuilder& g_;
};

onnx::TensorProto::DataType onnx_type(DType d) {
  switch (d) {
    case DType::float32:
    case DType::bfloat16:
      return onnx::TensorProto::FLOAT;
    case DType::float64:
      return onnx::TensorProto::DOUBLE;
    case DType::int32:
      return onnx::TensorProto::INT32;
    case DType::int64:
      return onnx::TensorProto::INT64;
    case DType::uint8:
      return onnx::TensorProto::UINT8;
  }
  return onnx::TensorProto::FLOAT;
}

void set_value_info(onnx::ValueInfoProto* v, const std::string& name, DType dtype,
                    const Shape& shape) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx_type(dtype));
  auto* s = t->mutable_shape();
  for (int i = 0; i < shape.rank(); ++i) {
    auto* d = s->add_dim();
    if (i == 0) {
      d->set_dim_param("batch");
    } else {
      d->set_dim_value(shape[i]);
    }
  }
}

}  // namespace

void export_onnx(const Model& model, const std::string& path, OnnxExportOptions options) {
  LOCKSTEP_CHECK(options.opset >= 13 && options.opset <= 17,
                 "export_onnx: expected opset between 13 and 17. Received: ", options.opset, ".");
  const std::vector<KerasTensor> inputs = model.inputs();
  LOCKSTEP_CHECK(inputs.size() == 1, "export_onnx: model '", model.name(),
                 "' must have one input (built). Received ", inputs.size(), ".");
  onnx::ModelProto proto;
  proto.set_ir_version(8);
  proto.set_producer_name("lockstep");
  proto.set_model_version(1);
  auto* opset = proto.add_opset_import();
  opset->set_domain("");
  opset->set_version(options.opset);
  onnx::GraphProto* graph = proto.mutable_graph();
  graph->set_name(model.name());
  GraphBuilder g(graph);
  Exporter e(g);
  const DType in_dtype = inputs[0].dtype();
  set_value_info(graph->add_input(), "input", in_dtype, inputs[0].shape());
  std::string out = e.model(model, {"input"});
  // The graph's output has a fixed name.
  onnx::NodeProto* n = graph->add_node();
  n->set_op_type("Identity");
  n->set_name("output/Identity");
  n->add_input(out);
  n->add_output("output");
  set_value_info(graph->add_output(), "output", DType::float32, model.output().shape());
  std::string bytes;
  LOCKSTEP_CHECK_AS(Internal, proto.SerializeToString(&bytes), "export_onnx: serializing '", path,
                    "' failed.");
  AtomicFileWriter file(path, "export_onnx");
  file.write(bytes.data(), bytes.size());
  file.commit();
}

}  // namespace lockstep::keras
