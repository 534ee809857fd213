#pragma once
// Umbrella header of keras.metrics, and keras.metrics.get: a metric by its Keras name.
#include <memory>
#include <string>

#include "lockstep/keras/metrics/accuracy_metrics.h"
#include "lockstep/keras/metrics/mean.h"
#include "lockstep/keras/metrics/metric.h"

namespace lockstep::keras::metrics {

// keras.metrics.get: a metric from its Keras string name — "accuracy" (also "acc"),
// "binary_accuracy", "categorical_accuracy", "sparse_categorical_accuracy",
// "top_k_categorical_accuracy", "sparse_top_k_categorical_accuracy", "mean". Note that
// compile(metrics=["accuracy"]) in Keras picks binary/categorical/sparse accuracy from the loss and
// output shape; that choice belongs to compile, and get("accuracy") is plain Accuracy.
std::unique_ptr<Metric> get(const std::string& name);

}  // namespace lockstep::keras::metrics
