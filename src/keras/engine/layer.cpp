#include "lockstep/keras/layer.h"

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "lockstep/autodiff/functions.h"
#include "lockstep/core/check.h"
#include "lockstep/core/task_cancellation.h"
#include "lockstep/keras/keras_tensor.h"
#include "lockstep/keras/mixed_precision.h"
#include "lockstep/ops/matmul.h"

namespace lockstep::keras {

namespace {
std::mutex names_mu;
std::map<std::string, int>& name_counters() {
  static std::map<std::string, int> m;
  return m;
}
}  // namespace

std::string unique_layer_name(const std::string& prefix) {
  std::lock_guard lock(names_mu);
  int n = name_counters()[prefix]++;
  return n == 0 ? prefix : prefix + "_" + std::to_string(n);
}

void clear_session() {
  std::lock_guard lock(names_mu);
  name_counters().clear();
}

Layer::Layer(const std::string& name, const std::string& prefix, const std::string& dtype)
    : name_(name.empty() ? unique_layer_name(prefix) : name),
      dtype_policy_(dtype.empty() ? mixed_precision::global_policy()
                                  : mixed_precision::Policy(dtype)) {}

Layer::~Layer() = default;

void Layer::maybe_build(const std::vector<Shape>& shapes) {
  if (built_) return;
  build(shapes);
  built_ = true;
}

void Layer::build(const std::vector<Shape>& input_shapes) {
  LOCKSTEP_CHECK(input_shapes.size() == 1 || accepts_multiple_inputs(), "Layer '", name_,
                 "' expects 1 input. Received ", input_shapes.size(), ".");
  build(input_shapes[0]);
}
void Layer::build(const Shape&) {}

Tensor Layer::call(const std::vector<Tensor>& inputs, bool training) {
  LOCKSTEP_CHECK(inputs.size() == 1, "Layer '", name_, "' (", class_name(),
                 ") expects 1 input. Received ", inputs.size(), ".");
  return call(inputs[0], training);
}
Tensor Layer::call(const Tensor&, bool) {
  throw Internal("Layer '" + name_ + "' (" + class_name() +
                 ") overrides neither call(const Tensor&) nor call(const std::vector<Tensor>&).");
}

std::vector<Shape> Layer::compute_output_shapes(const std::vector<Shape>& input_shapes) const {
  LOCKSTEP_CHECK(input_shapes.size() == 1, "Layer '", name_, "' expects 1 input. Received ",
                 input_shapes.size(), ".");
  return {compute_output_shape(input_shapes[0])};
}
Shape Layer::compute_output_shape(const Shape& input_shape) const {
  return input_shape;
}

Tensor Layer::operator()(const Tensor& inputs, bool training) {
  // A layer boundary is a safe point for a training-step run whose twin already finished.
  check_task_cancelled();
  maybe_build({inputs.shape()});
  detail::LayerCallScope scope;
  Tensor y = call(inputs, training);
  return finish_call(std::move(y), scope);
}

Tensor Layer::operator()(const std::vector<Tensor>& inputs, bool training) {
  check_task_cancelled();
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  maybe_build(shapes);
  detail::LayerCallScope scope;
  Tensor y = call(inputs, training);
  return finish_call(std::move(y), scope);
}

bool Layer::computes_bfloat16_in_float32() const {
  return dtype_policy_.name() == "mixed_bfloat16" && ops::mixed_bfloat16_computes_in_f32();
}

DType Layer::compute_dtype() const {
  return computes_bfloat16_in_float32() ? DType::float32 : dtype_policy_.compute_dtype();
}

void Layer::keep_float32_output() {
  detail::LayerCallScope::set_float32_output();
}

Tensor Layer::finish_call(Tensor y, const detail::LayerCallScope& scope) const {
  if (!y.defined() || y.dtype() != DType::float32) return y;
  const bool outermost = scope.outermost(), float32_output = scope.float32_output();
  const bool float32_form = computes_bfloat16_in_float32();
  if (float32_form && !contains_layers() && !float32_output && !scope.output_read_rounded() &&
      !y.holds_bfloat16_values()) {
    // In place unless another handle sees it (an input returned as it is, a saved tensor).
    y = to_bfloat16_values(y, /*reuse_sole_handle=*/true);
  }
  // Exact: the values are bfloat16 values.
  if (outermost && (float32_form || contains_layers()) && y.holds_bfloat16_values()) {
    y = cast(y, DType::bfloat16);
  }
  return y;
}

KerasTensor Layer::operator()(const KerasTensor& inputs) {
  return (*this)(std::vector<KerasTensor>{inputs});
}

KerasTensor Layer::operator()(const std::vector<KerasTensor>& inputs) {
  std::vector<Shape> shapes;
  for (const KerasTensor& t : inputs) {
    LOCKSTEP_CHECK(t.defined(), "Layer '", name_, "': called on an undefined KerasTensor.");
    shapes.push_back(t.shape());
  }
  maybe_build(shapes);
  std::shared_ptr<Layer> self = weak_from_this().lock();
  if (!self) self = std::move(*this).move_to_shared();
  Shape out = self->compute_output_shapes(shapes)[0];
  auto node = std::make_shared<KerasNode>(KerasNode{self, inputs});
  return KerasTensor(out, inputs[0].dtype(), node);
}

Tensor Layer::autocast(const Tensor& t) const {
  if (!t.defined() || !is_floating(t.dtype())) return t;
  if (computes_bfloat16_in_float32()) {
    if (t.holds_bfloat16_values()) return t;
    if (t.dtype() == DType::bfloat16) {
      // Widening is exact; the cast's gradient is rounded to bfloat16.
      Tensor w = cast(t, DType::float32);
      w.mark_bfloat16_values();
      return w;
    }
    return to_bfloat16_values(t.dtype() == DType::float32 ? t : cast(t, DType::float32));
  }
  const DType compute = compute_dtype();
  if (t.dtype() == compute) return t;
  return cast(t, compute);
}

Tensor Layer::round_like_bfloat16(const Tensor& t) const {
  if (!computes_bfloat16_in_float32() || t.dtype() != DType::float32 || t.holds_bfloat16_values())
    return t;
  return to_bfloat16_values(t, /*reuse_sole_handle=*/true);
}

Tensor Layer::autocast(const Variable& v) const {
  // The policy's copies of the weights, which the optimizer rewrites as it updates them: no
  // conversion (and no allocation) per call.
  if (computes_bfloat16_in_float32() && v.dtype() == DType::float32) {
    Tensor r = rounded_as_recorded(v.value(), mixed_precision::rounded_weights(v));
    r.mark_bfloat16_values();
    return r;
  }
  if (compute_dtype() == DType::bfloat16 && v.dtype() == DType::float32) {
    return rounded_as_recorded(v.value(), mixed_precision::bfloat16_weights(v));
  }
  return autocast(v.value());
}

nlohmann::json Layer::get_config() const {
  return {{"name", name_}, {"trainable", trainable_}};
}

std::vector<Variable> Layer::trainable_weights() const {
  std::vector<Variable> out;
  for (const Variable& v : own_weights())
    if (v.trainable() && trainable_) out.push_back(v);
  return out;
}

std::vector<Variable> Layer::non_trainable_weights() const {
  std::vector<Variable> out;
  for (const Variable& v : own_weights())
    if (!v.trainable() || !trainable_) out.push_back(v);
  return out;
}

std::vector<Variable> Layer::weights() const {
  std::vector<Variable> out = trainable_weights();
  for (const Variable& v : non_trainable_weights()) out.push_back(v);
  return out;
}

int64_t Layer::count_params() const {
  int64_t n = 0;
  for (const Variable& v : own_weights()) n += v.num_elements();
  return n;
}

Variable Layer::add_weight(const std::string& name, const Shape& shape,
                           const initializers::Initializer& initializer, bool trainable,
                           DType dtype) {
  Variable v(initializer(shape, dtype), name_ + "/" + name, trainable);
  weights_.push_back(v);
  return v;
}

}  // namespace lockstep::keras
