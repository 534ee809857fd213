#pragma once
// RMSprop (keras.optimizers.RMSprop):
//   v <- rho * v + (1 - rho) * g^2
//   centered: a <- rho * a + (1 - rho) * g;  d = v - a^2 + epsilon
//   otherwise:                              d = v + epsilon
//   increment = lr * g / sqrt(d)               (epsilon inside the root, as Keras)
//   momentum > 0: mom <- momentum * mom + increment;  w <- w - mom
//   otherwise:    w <- w - increment
// Slots: "velocity", then "momentum" (momentum > 0), then "average_gradient" (centered).
#include <memory>

#include "lockstep/keras/optimizers/optimizer.h"

namespace lockstep::keras::optimizers {

struct RMSpropOptions {
  LearningRate learning_rate = 0.001;
  double rho = 0.9;
  double momentum = 0.0;
  double epsilon = 1e-7;
  bool centered = false;
  BaseOptions base{};
  std::string name = "rmsprop";
};

class RMSprop final : public OptimizerImpl<RMSprop, RMSpropOptions> {
 public:
  explicit RMSprop(RMSpropOptions options = {});
  nlohmann::json get_config() const override;

 protected:
  std::vector<std::string> slot_names() const override;
  void prepare_step(StepInfo& info) const override;
  void update_step(const UpdateSpan& span, const StepInfo& info) const override;
  bool reads_bfloat16_gradient_pairs() const override { return true; }
};

}  // namespace lockstep::keras::optimizers
