#pragma once
// Losses as Keras defines them (keras.losses). `call` returns per-example losses [batch];
// `operator()` applies Keras' default reduction, the mean over the batch ("sum_over_batch_size").
// Under a distribution strategy, fit() instead divides the per-replica sum by the *global* batch
// size (distribute::compute_average_loss), so that summing gradients over replicas is exact.
//
//   CategoricalCrossentropy:       -sum(y * log(clip(p / sum(p), 1e-7, 1 - 1e-7))) (probabilities)
//                                  -sum(y * log_softmax(z))                           (from_logits)
//   SparseCategoricalCrossentropy: the same with integer labels
//   BinaryCrossentropy:            mean over the last axis of -(y log p + (1 - y) log(1 - p))
//   MeanSquaredError / MeanAbsoluteError: mean over the last axis of (y - p)^2 / |y - p|
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "lockstep/core/tensor.h"

namespace lockstep::keras::losses {

class Loss {
 public:
  virtual ~Loss() = default;
  virtual Tensor call(const Tensor& y_true, const Tensor& y_pred) const = 0;
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const;
  virtual std::string name() const = 0;
  virtual nlohmann::json get_config() const;
  virtual std::shared_ptr<Loss> clone() const = 0;
};

struct CrossentropyOptions {
  bool from_logits = false;
  std::string name = "";
};

class CategoricalCrossentropy : public Loss {
 public:
  explicit CategoricalCrossentropy(CrossentropyOptions options = {}) : options_(options) {}
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override;
  nlohmann::json get_config() const override;
  std::shared_ptr<Loss> clone() const override {
    return std::make_shared<CategoricalCrossentropy>(*this);
  }

 private:
  CrossentropyOptions options_;
};

class SparseCategoricalCrossentropy : public Loss {
 public:
  explicit SparseCategoricalCrossentropy(CrossentropyOptions options = {}) : options_(options) {}
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override;
  nlohmann::json get_config() const override;
  std::shared_ptr<Loss> clone() const override {
    return std::make_shared<SparseCategoricalCrossentropy>(*this);
  }

 private:
  CrossentropyOptions options_;
};

class BinaryCrossentropy : public Loss {
 public:
  explicit BinaryCrossentropy(CrossentropyOptions options = {}) : options_(options) {}
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override;
  nlohmann::json get_config() const override;
  std::shared_ptr<Loss> clone() const override {
    return std::make_shared<BinaryCrossentropy>(*this);
  }

 private:
  CrossentropyOptions options_;
};

class MeanSquaredError : public Loss {
 public:
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "mean_squared_error"; }
  std::shared_ptr<Loss> clone() const override { return std::make_shared<MeanSquaredError>(); }
};

class MeanAbsoluteError : public Loss {
 public:
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "mean_absolute_error"; }
  std::shared_ptr<Loss> clone() const override { return std::make_shared<MeanAbsoluteError>(); }
};

// Keras string identifiers: "categorical_crossentropy", "sparse_categorical_crossentropy",
// "binary_crossentropy", "mean_squared_error"/"mse", "mean_absolute_error"/"mae".
std::shared_ptr<Loss> get(const std::string& name);

}  // namespace lockstep::keras::losses
