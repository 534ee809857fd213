#pragma once
// SGD (keras.optimizers.SGD), Keras' momentum form:
//   momentum == 0:  w <- w - lr * g
//   momentum > 0:   m <- momentum * m - lr * g
//                   w <- w + m                         (plain)
//                   w <- w + momentum * m - lr * g     (nesterov, with the new m)
// Slot: "momentum" (only when momentum > 0).
#include <memory>

#include "lockstep/keras/optimizers/optimizer.h"

namespace lockstep::keras::optimizers {

struct SGDOptions {
  LearningRate learning_rate = 0.01;
  double momentum = 0.0;  // in [0, 1]
  bool nesterov = false;
  BaseOptions base{};
  std::string name = "SGD";
};

class SGD final : public OptimizerImpl<SGD, SGDOptions> {
 public:
  explicit SGD(SGDOptions options = {});
  nlohmann::json get_config() const override;

 protected:
  std::vector<std::string> slot_names() const override;
  void prepare_step(StepInfo& info) const override;
  void update_step(const UpdateSpan& span, const StepInfo& info) const override;
  bool reads_bfloat16_gradient_pairs() const override { return true; }
};

}  // namespace lockstep::keras::optimizers
