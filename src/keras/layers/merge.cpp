#include "lockstep/keras/layers/merge.h"

#include <nlohmann/json.hpp>

#include "lockstep/autodiff/functions.h"
#include "lockstep/core/check.h"

namespace lockstep::keras::layers {

namespace {

std::string shapes_string(const std::vector<Shape>& shapes) {
  std::string s = "[";
  for (size_t i = 0; i < shapes.size(); ++i) s += (i ? ", " : "") + shapes[i].to_string();
  return s + "]";
}

std::vector<Shape> shapes_of(const std::vector<Tensor>& xs) {
  std::vector<Shape> out;
  for (const Tensor& x : xs) out.push_back(x.shape());
  return out;
}

void require_several(const std::string& layer, const std::string& name,
                     const std::vector<Shape>& shapes) {
  LOCKSTEP_CHECK(shapes.size() >= 2, layer, " '", name,
                 "' expects a list of at least 2 inputs. Received: ", shapes.size(), " input(s).");
}

// Dimension d of two shapes agrees; on the batch axis 0 (unknown) matches anything.
bool dims_agree(const Shape& a, const Shape& b, int d) {
  return a[d] == b[d] || (d == 0 && (a[0] == 0 || b[0] == 0));
}

}  // namespace

Add::Add(const std::string& name, const std::string& dtype) : LayerImpl(name, "add", dtype) {}

std::vector<Shape> Add::compute_output_shapes(const std::vector<Shape>& shapes) const {
  require_several("Add", name(), shapes);
  Shape out = shapes[0];
  for (const Shape& s : shapes) {
    bool same = s.rank() == out.rank();
    for (int d = 0; same && d < s.rank(); ++d) same = dims_agree(s, out, d);
    LOCKSTEP_CHECK(same, "Add '", name(), "' expects inputs of one shape. Received shapes ",
                   shapes_string(shapes), ".");
    if (out.rank() && out[0] == 0) out[0] = s[0];
  }
  return {out};
}

void Add::build(const std::vector<Shape>& shapes) {
  compute_output_shapes(shapes);
}

Tensor Add::call(const std::vector<Tensor>& inputs, bool) {
  compute_output_shapes(shapes_of(inputs));
  // Autocast: a float32 skip connection and a bfloat16 branch meet in the compute dtype.
  if (computes_bfloat16_in_float32() && inputs.size() == 2 &&
      inputs[0].shape() == inputs[1].shape()) {
    // Rounds float32 inputs as it reads them (the autocast) and the sum as it stores it: a
    // producer whose only readers are Adds leaves its output unrounded (Model::call).
    auto in = [this](const Tensor& t) { return t.dtype() == DType::float32 ? t : autocast(t); };
    return add_to_bfloat16_values(in(inputs[0]), in(inputs[1]), /*round_inputs=*/true);
  }
  Tensor sum = add(autocast(inputs[0]), autocast(inputs[1]));
  for (size_t i = 2; i < inputs.size(); ++i) sum = add(sum, autocast(inputs[i]));
  return sum;
}

Concatenate::Concatenate(ConcatenateOptions options)
    : LayerImpl(options.name, "concatenate", options.dtype), options_(std::move(options)) {}

std::vector<Shape> Concatenate::compute_output_shapes(const std::vector<Shape>& shapes) const {
  require_several("Concatenate", name(), shapes);
  const int rank = shapes[0].rank();
  const int axis = options_.axis < 0 ? options_.axis + rank : options_.axis;
  LOCKSTEP_CHECK(axis > 0 && axis < rank, "Concatenate '", name(), "': expected an axis in [1, ",
                 rank, ") or [", -rank + 1, ", 0) for inputs of rank ", rank,
                 ". Received: axis=", options_.axis, ".");
  Shape out = shapes[0];
  out[axis] = 0;
  for (const Shape& s : shapes) {
    bool ok = s.rank() == rank;
    for (int d = 0; ok && d < rank; ++d) ok = d == axis || dims_agree(s, shapes[0], d);
    LOCKSTEP_CHECK(ok, "Concatenate '", name(), "' expects inputs that match except along axis ",
                   options_.axis, ". Received shapes ", shapes_string(shapes), ".");
    out[axis] += s[axis];
    if (out[0] == 0) out[0] = s[0];
  }
  return {out};
}

void Concatenate::build(const std::vector<Shape>& shapes) {
  compute_output_shapes(shapes);
}

Tensor Concatenate::call(const std::vector<Tensor>& inputs, bool) {
  compute_output_shapes(shapes_of(inputs));
  const int rank = inputs[0].rank();
  std::vector<Tensor> cast_inputs;
  cast_inputs.reserve(inputs.size());
  for (const Tensor& t : inputs) cast_inputs.push_back(autocast(t));
  return concat(cast_inputs, options_.axis < 0 ? options_.axis + rank : options_.axis);
}

nlohmann::json Concatenate::get_config() const {
  auto c = Layer::get_config();
  c["axis"] = options_.axis;
  c["dtype"] = dtype_policy().name();
  return c;
}

}  // namespace lockstep::keras::layers
