#pragma once
// Learning-rate schedules (keras.optimizers.schedules): a function of the optimizer's iteration
// count, evaluated once per step before the update (at `iterations`, i.e. 0 for the first step).
//
//   auto lr = std::make_shared<CosineDecay>(CosineDecayOptions{.initial_learning_rate = 0.1,
//                                                              .decay_steps = 1000});
//   Adam opt({.learning_rate = lr});
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace lockstep::keras::optimizers::schedules {

class LearningRateSchedule {
 public:
  virtual ~LearningRateSchedule() = default;
  // The learning rate at optimizer iteration `step` (0-based).
  virtual double operator()(int64_t step) const = 0;
  virtual std::string class_name() const = 0;
  virtual nlohmann::json get_config() const = 0;
};

// lr(step) = initial_learning_rate * decay_rate ^ (step / decay_steps)
// with the exponent floored to an integer when `staircase`.
struct ExponentialDecayOptions {
  double initial_learning_rate = 0.0;
  int64_t decay_steps = 0;  // > 0
  double decay_rate = 0.0;  // > 0
  bool staircase = false;
};

class ExponentialDecay final : public LearningRateSchedule {
 public:
  explicit ExponentialDecay(ExponentialDecayOptions options);
  double operator()(int64_t step) const override;
  std::string class_name() const override { return "ExponentialDecay"; }
  nlohmann::json get_config() const override;
  const ExponentialDecayOptions& options() const { return o_; }

 private:
  ExponentialDecayOptions o_;
};

// Without warmup (warmup_target unset), with s = min(step, decay_steps):
//   lr(step) = initial_learning_rate * ((1 - alpha) * 0.5 * (1 + cos(pi * s / decay_steps)) +
//   alpha)
// With warmup, s = min(step, warmup_steps + decay_steps):
//   s <  warmup_steps: lr = initial_learning_rate
//                           + (warmup_target - initial_learning_rate) * s / warmup_steps
//   s >= warmup_steps: the cosine above with s - warmup_steps, decaying from warmup_target.
struct CosineDecayOptions {
  double initial_learning_rate = 0.0;
  int64_t decay_steps = 0;  // > 0
  double alpha = 0.0;       // the final rate as a fraction of the decayed-from rate
  std::optional<double> warmup_target{};
  int64_t warmup_steps = 0;
};

class CosineDecay final : public LearningRateSchedule {
 public:
  explicit CosineDecay(CosineDecayOptions options);
  double operator()(int64_t step) const override;
  std::string class_name() const override { return "CosineDecay"; }
  nlohmann::json get_config() const override;
  const CosineDecayOptions& options() const { return o_; }

 private:
  CosineDecayOptions o_;
};

// lr(step) = values[0] for step <= boundaries[0], values[i] for boundaries[i-1] < step <=
// boundaries[i], values.back() for step > boundaries.back(). Boundaries strictly increasing;
// values.size() == boundaries.size() + 1.
class PiecewiseConstantDecay final : public LearningRateSchedule {
 public:
  PiecewiseConstantDecay(std::vector<int64_t> boundaries, std::vector<double> values);
  double operator()(int64_t step) const override;
  std::string class_name() const override { return "PiecewiseConstantDecay"; }
  nlohmann::json get_config() const override;

 private:
  std::vector<int64_t> boundaries_;
  std::vector<double> values_;
};

// {"class_name": ..., "config": {...}} as keras.saving.serialize_keras_object writes it.
nlohmann::json serialize(const LearningRateSchedule& schedule);
// The inverse of serialize(); throws InvalidArgument for an unknown class_name.
std::shared_ptr<LearningRateSchedule> deserialize(const nlohmann::json& config);

}  // namespace lockstep::keras::optimizers::schedules
