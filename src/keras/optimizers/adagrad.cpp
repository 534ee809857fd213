#include "lockstep/keras/optimizers/adagrad.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "lockstep/core/check.h"
#include "lockstep/core/error.h"

namespace lockstep::keras::optimizers {

Adagrad::Adagrad(AdagradOptions options) : OptimizerImpl(std::move(options)) {
  LOCKSTEP_CHECK(o_.initial_accumulator_value >= 0.0,
                 "Adagrad: expected initial_accumulator_value >= 0. Received: "
                 "initial_accumulator_value=",
                 o_.initial_accumulator_value);
}

float Adagrad::slot_initial_value(int) const {
  return static_cast<float>(o_.initial_accumulator_value);
}

namespace {
// Adagrad's per-step constants (StepInfo::set_constants).
struct AdagradConstants {
  float learning_rate, epsilon;
};
}  // namespace

void Adagrad::prepare_step(StepInfo& info) const {
  info.set_constants(AdagradConstants{.learning_rate = static_cast<float>(info.learning_rate),
                                      .epsilon = static_cast<float>(o_.epsilon)});
}

void Adagrad::update_step(float* __restrict w, const float* __restrict g,
                          std::span<float* const> slots, size_t n, const StepInfo& info) const {
  float* __restrict acc = slots[0];
  const auto k = info.constants<AdagradConstants>();
  const float lr = k.learning_rate, eps = k.epsilon;
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float ai = acc[i] + gi * gi;
    acc[i] = ai;
    w[i] -= lr * gi / std::sqrt(ai + eps);
  }
}

nlohmann::json Adagrad::get_config() const {
  nlohmann::json c = Optimizer::get_config();
  c["initial_accumulator_value"] = o_.initial_accumulator_value;
  c["epsilon"] = o_.epsilon;
  return c;
}

}  // namespace lockstep::keras::optimizers
