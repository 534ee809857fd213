#pragma once
// Adam (keras.optimizers.Adam), in Keras' "epsilon-hat" form. With t = iterations + 1:
//   m <- m + (g - m) * (1 - beta_1)
//   v <- v + (g^2 - v) * (1 - beta_2)
//   amsgrad: v_hat <- max(v_hat, v), and v_hat replaces v below
//   alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
//   w <- w - m * alpha / (sqrt(v) + epsilon)
// alpha is computed once per step in double and rounded to float32 (Keras: float32 throughout).
// Slots: "m", "v" (+ "v_hat" with amsgrad).
#include <memory>

#include "lockstep/keras/optimizers/optimizer.h"

namespace lockstep::keras::optimizers {

struct AdamOptions {
  LearningRate learning_rate = 0.001;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  bool amsgrad = false;
  BaseOptions base{};
  std::string name = "adam";
};

class Adam : public OptimizerImpl<Adam, AdamOptions> {
 public:
  explicit Adam(AdamOptions options = {});
  nlohmann::json get_config() const override;

 protected:
  std::vector<std::string> slot_names() const override;
  void prepare_step(StepInfo& info) const override;
  void update_step(const UpdateSpan& span, const StepInfo& info) const override;
  bool reads_bfloat16_gradient_pairs() const override { return true; }
};

}  // namespace lockstep::keras::optimizers
