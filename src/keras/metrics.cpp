#include "lockstep/keras/metrics.h"

#include "lockstep/core/error.h"

namespace lockstep::keras::metrics {

std::unique_ptr<Metric> get(const std::string& name) {
  if (name == "accuracy" || name == "acc") return std::make_unique<Accuracy>();
  if (name == "binary_accuracy") return std::make_unique<BinaryAccuracy>();
  if (name == "categorical_accuracy") return std::make_unique<CategoricalAccuracy>();
  if (name == "sparse_categorical_accuracy") return std::make_unique<SparseCategoricalAccuracy>();
  if (name == "top_k_categorical_accuracy") return std::make_unique<TopKCategoricalAccuracy>();
  if (name == "sparse_top_k_categorical_accuracy") {
    return std::make_unique<SparseTopKCategoricalAccuracy>();
  }
  if (name == "mean") return std::make_unique<Mean>();
  throw InvalidArgument(
      "metrics::get: expected one of 'accuracy', 'binary_accuracy', 'categorical_accuracy', "
      "'sparse_categorical_accuracy', 'top_k_categorical_accuracy', "
      "'sparse_top_k_categorical_accuracy', 'mean'. Received: name='" +
      name + "'");
}

}  // namespace lockstep::keras::metrics
