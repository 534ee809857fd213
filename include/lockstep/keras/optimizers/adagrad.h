#pragma once
// Adagrad (keras.optimizers.Adagrad):
//   acc <- acc + g^2                      (acc starts at initial_accumulator_value)
//   w   <- w - lr * g / sqrt(acc + epsilon)
// Slot: "accumulator".
#include <memory>

#include "lockstep/keras/optimizers/optimizer.h"

namespace lockstep::keras::optimizers {

struct AdagradOptions {
  LearningRate learning_rate = 0.001;
  double initial_accumulator_value = 0.1;
  double epsilon = 1e-7;
  BaseOptions base{};
  std::string name = "adagrad";
};

class Adagrad final : public OptimizerImpl<Adagrad, AdagradOptions> {
 public:
  explicit Adagrad(AdagradOptions options = {});
  nlohmann::json get_config() const override;

 protected:
  std::vector<std::string> slot_names() const override { return {"accumulator"}; }
  float slot_initial_value(int) const override;
  void prepare_step(StepInfo& info) const override;
  void update_step(const UpdateSpan& span, const StepInfo& info) const override;
  bool reads_bfloat16_gradient_pairs() const override { return true; }
};

}  // namespace lockstep::keras::optimizers
