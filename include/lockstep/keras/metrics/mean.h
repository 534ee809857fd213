#pragma once
// Mean (keras.metrics.Mean): the weighted mean of the values it is given,
//   result = sum(value * weight) / sum(weight).
// fit() uses one to track the loss.
#include "lockstep/keras/metrics/metric.h"

namespace lockstep::keras::metrics {

class Mean final : public Metric {
 public:
  explicit Mean(std::string name = "mean") : Metric(std::move(name)) {}

  void update_state(double value, double weight = 1.0) {
    total_ += value * weight;
    count_ += weight;
  }
  // Keras Mean.update_state(values, sample_weight): values of any shape, averaged per sample.
  void update_values(const Tensor& values, const Tensor& sample_weight = {});
  // As a compiled metric: averages y_pred (y_true is ignored).
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = {}) override;
  std::unique_ptr<Metric> clone() const override;
};

}  // namespace lockstep::keras::metrics
