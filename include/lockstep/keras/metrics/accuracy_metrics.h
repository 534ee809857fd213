#pragma once
// The accuracy metrics of keras.metrics; each is the weighted mean of a 0/1 value per row (see
// metric.h for the weighting):
//   Accuracy                       y_true == y_pred, elementwise
//   BinaryAccuracy                 y_true == (y_pred > threshold ? 1 : 0), elementwise
//   CategoricalAccuracy            argmax(y_true) == argmax(y_pred) over the last axis
//   SparseCategoricalAccuracy      y_true == argmax(y_pred); y_true holds labels ([B] or [B, 1])
//   TopKCategoricalAccuracy        argmax(y_true) is in the top k of y_pred
//   SparseTopKCategoricalAccuracy  y_true (a label) is in the top k of y_pred
// argmax returns the first maximum (NaN counts as the maximum, as NumPy). "In the top k" follows
// tf.math.in_top_k: fewer than k classes score strictly higher than the target (ties at the
// boundary count as in), and a non-finite target score is never in.
#include "lockstep/keras/metrics/metric.h"

namespace lockstep::keras::metrics {

class Accuracy final : public Metric {
 public:
  explicit Accuracy(std::string name = "accuracy") : Metric(std::move(name)) {}
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = {}) override;
  std::unique_ptr<Metric> clone() const override;
};

struct BinaryAccuracyOptions {
  double threshold = 0.5;
  std::string name = "binary_accuracy";
};

class BinaryAccuracy final : public Metric {
 public:
  explicit BinaryAccuracy(BinaryAccuracyOptions options = {});
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = {}) override;
  std::unique_ptr<Metric> clone() const override;
  nlohmann::json get_config() const override;

 private:
  BinaryAccuracyOptions o_;
};

class CategoricalAccuracy final : public Metric {
 public:
  explicit CategoricalAccuracy(std::string name = "categorical_accuracy")
      : Metric(std::move(name)) {}
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = {}) override;
  std::unique_ptr<Metric> clone() const override;
};

class SparseCategoricalAccuracy final : public Metric {
 public:
  explicit SparseCategoricalAccuracy(std::string name = "sparse_categorical_accuracy")
      : Metric(std::move(name)) {}
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = {}) override;
  std::unique_ptr<Metric> clone() const override;
};

struct TopKCategoricalAccuracyOptions {
  int k = 5;
  std::string name = "top_k_categorical_accuracy";
};

class TopKCategoricalAccuracy final : public Metric {
 public:
  explicit TopKCategoricalAccuracy(TopKCategoricalAccuracyOptions options = {});
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = {}) override;
  std::unique_ptr<Metric> clone() const override;
  nlohmann::json get_config() const override;

 private:
  TopKCategoricalAccuracyOptions o_;
};

struct SparseTopKCategoricalAccuracyOptions {
  int k = 5;
  std::string name = "sparse_top_k_categorical_accuracy";
};

class SparseTopKCategoricalAccuracy final : public Metric {
 public:
  explicit SparseTopKCategoricalAccuracy(SparseTopKCategoricalAccuracyOptions options = {});
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = {}) override;
  std::unique_ptr<Metric> clone() const override;
  nlohmann::json get_config() const override;

 private:
  SparseTopKCategoricalAccuracyOptions o_;
};

}  // namespace lockstep::keras::metrics
