#pragma once
// AdamW (keras.optimizers.AdamW): Adam with decoupled weight decay, applied by the base class
// before the Adam update with the step's learning rate:
//   w <- w - w * weight_decay * lr
//   then Adam's rule (see adam.h).
// Defaults as Keras: weight_decay 0.004, the rest as Adam.
#include <memory>

#include "lockstep/keras/optimizers/adam.h"

namespace lockstep::keras::optimizers {

struct AdamWOptions {
  LearningRate learning_rate = 0.001;
  double weight_decay = 0.004;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  bool amsgrad = false;
  // Clipping, exclude_from_weight_decay, gradient accumulation; base.weight_decay stays unset
  // (AdamW's weight_decay above is the one).
  BaseOptions base{};
  std::string name = "adamw";
};

class AdamW final : public Adam {
 public:
  explicit AdamW(AdamWOptions options = {});
  std::unique_ptr<Optimizer> clone() const override;
  const AdamWOptions& adamw_options() const { return w_; }

 private:
  AdamWOptions w_;
};

}  // namespace lockstep::keras::optimizers
