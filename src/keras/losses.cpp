#include "lockstep/keras/losses.h"

#include <nlohmann/json.hpp>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/losses.h"
#include "lockstep/keras/activations.h"

namespace lockstep::keras::losses {

namespace {
// Labels and targets arrive from datasets as uint8/int/float; losses compute in the prediction's
// float type.
Tensor as_float_like(const Tensor& t, const Tensor& like) {
  DType d = like.dtype() == DType::float64 ? DType::float64 : DType::float32;
  return t.dtype() == d ? t : t.to(d);
}
Tensor as_float(const Tensor& t) {
  return t.dtype() == DType::bfloat16 ? cast(t, DType::float32) : t;
}
}  // namespace

Tensor Loss::operator()(const Tensor& y_true, const Tensor& y_pred) const {
  return reduce_mean(call(y_true, y_pred));
}
nlohmann::json Loss::get_config() const {
  return {{"name", name()}};
}

Tensor CategoricalCrossentropy::call(const Tensor& y_true, const Tensor& y_pred) const {
  if (!options_.from_logits) {
    // Predictions straight out of a softmax activation: from their logits (Keras' _keras_logits).
    if (Tensor z = activations::take_softmax_logits(y_pred); z.defined()) {
      Tensor zf = as_float(z), p = as_float(y_pred);
      if (zf.rank() == 2 && p.dtype() == zf.dtype()) {
        // The softmax's own probabilities give log-sum-exp and the gradient without recomputing
        // exponentials.
        return softmax_crossentropy(as_float_like(y_true, zf), zf, p);
      }
      return categorical_crossentropy(as_float_like(y_true, zf), zf, /*from_logits=*/true);
    }
  }
  Tensor p = as_float(y_pred);
  return categorical_crossentropy(as_float_like(y_true, p), p, options_.from_logits);
}
std::string CategoricalCrossentropy::name() const {
  return options_.name.empty() ? "categorical_crossentropy" : options_.name;
}
nlohmann::json CategoricalCrossentropy::get_config() const {
  return {{"name", name()}, {"from_logits", options_.from_logits}};
}

Tensor SparseCategoricalCrossentropy::call(const Tensor& y_true, const Tensor& y_pred) const {
  Tensor labels = y_true;
  if (labels.dtype() != DType::int32 && labels.dtype() != DType::int64)
    labels = labels.to(DType::int64);
  if (!options_.from_logits) {
    if (Tensor z = activations::take_softmax_logits(y_pred); z.defined()) {
      return sparse_categorical_crossentropy(labels, as_float(z), /*from_logits=*/true);
    }
  }
  return sparse_categorical_crossentropy(labels, as_float(y_pred), options_.from_logits);
}
std::string SparseCategoricalCrossentropy::name() const {
  return options_.name.empty() ? "sparse_categorical_crossentropy" : options_.name;
}
nlohmann::json SparseCategoricalCrossentropy::get_config() const {
  return {{"name", name()}, {"from_logits", options_.from_logits}};
}

Tensor BinaryCrossentropy::call(const Tensor& y_true, const Tensor& y_pred) const {
  Tensor p = as_float(y_pred);
  return binary_crossentropy(as_float_like(y_true, p), p, options_.from_logits);
}
std::string BinaryCrossentropy::name() const {
  return options_.name.empty() ? "binary_crossentropy" : options_.name;
}
nlohmann::json BinaryCrossentropy::get_config() const {
  return {{"name", name()}, {"from_logits", options_.from_logits}};
}

Tensor MeanSquaredError::call(const Tensor& y_true, const Tensor& y_pred) const {
  Tensor p = as_float(y_pred);
  return mean_squared_error(as_float_like(y_true, p), p);
}

Tensor MeanAbsoluteError::call(const Tensor& y_true, const Tensor& y_pred) const {
  Tensor p = as_float(y_pred);
  return mean_absolute_error(as_float_like(y_true, p), p);
}

std::shared_ptr<Loss> get(const std::string& name) {
  if (name == "categorical_crossentropy") return std::make_shared<CategoricalCrossentropy>();
  if (name == "sparse_categorical_crossentropy")
    return std::make_shared<SparseCategoricalCrossentropy>();
  if (name == "binary_crossentropy") return std::make_shared<BinaryCrossentropy>();
  if (name == "mean_squared_error" || name == "mse") return std::make_shared<MeanSquaredError>();
  if (name == "mean_absolute_error" || name == "mae") return std::make_shared<MeanAbsoluteError>();
  throw InvalidArgument("Unknown loss '" + name +
                        "'. Expected one of categorical_crossentropy, "
                        "sparse_categorical_crossentropy, binary_crossentropy, mean_squared_error, "
                        "mean_absolute_error.");
}

}  // namespace lockstep::keras::losses
