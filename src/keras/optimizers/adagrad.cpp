#include "lockstep/keras/optimizers/adagrad.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "lockstep/core/error.h"

namespace lockstep::keras::optimizers {

Adagrad::Adagrad(AdagradOptions options)
    : Optimizer(common_options(options)), o_(std::move(options)) {
  if (!(o_.initial_accumulator_value >= 0.0)) {
    throw InvalidArgument(
        "Adagrad: expected initial_accumulator_value >= 0. Received: initial_accumulator_value=" +
        std::to_string(o_.initial_accumulator_value));
  }
}

float Adagrad::slot_initial_value(int) const {
  return static_cast<float>(o_.initial_accumulator_value);
}

void Adagrad::prepare_step(StepInfo& info) const {
  info.c[0] = static_cast<float>(info.learning_rate);
  info.c[1] = static_cast<float>(o_.epsilon);
}

void Adagrad::update_step(float* __restrict w, const float* __restrict g,
                          std::span<float* const> slots, size_t n, const StepInfo& info) const {
  float* __restrict acc = slots[0];
  const float lr = info.c[0], eps = info.c[1];
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

std::unique_ptr<Optimizer> Adagrad::clone() const {
  AdagradOptions o = o_;
  if (!o.learning_rate.is_schedule()) o.learning_rate = learning_rate();
  return std::make_unique<Adagrad>(o);
}

}  // namespace lockstep::keras::optimizers
