#include "lockstep/keras/optimizers/adagrad.h"

#include <array>
#include <cmath>
#include <nlohmann/json.hpp>

#include "dispatched_rule.h"
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

// Adagrad's rule for one element (elementwise_rule.h); slot "accumulator".
struct AdagradRule : AdagradConstants {
  static constexpr size_t kSlots = 1;
  [[gnu::always_inline]] float operator()(float w, float g, std::array<float, kSlots>& s) const {
    s[0] = s[0] + g * g;
    return w - learning_rate * g / std::sqrt(s[0] + epsilon);
  }
};
}  // namespace

void Adagrad::prepare_step(StepInfo& info) const {
  info.set_constants(AdagradConstants{.learning_rate = static_cast<float>(info.learning_rate),
                                      .epsilon = static_cast<float>(o_.epsilon)});
}

void Adagrad::update_step(const UpdateSpan& span, const StepInfo& info) const {
  detail::run_rule(AdagradRule{info.constants<AdagradConstants>()}, span);
}

nlohmann::json Adagrad::get_config() const {
  nlohmann::json c = Optimizer::get_config();
  c["initial_accumulator_value"] = o_.initial_accumulator_value;
  c["epsilon"] = o_.epsilon;
  return c;
}

}  // namespace lockstep::keras::optimizers
