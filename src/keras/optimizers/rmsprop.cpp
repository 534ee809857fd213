#include "lockstep/keras/optimizers/rmsprop.h"

#include <array>
#include <cmath>
#include <nlohmann/json.hpp>

#include "dispatched_rule.h"
#include "lockstep/core/check.h"
#include "lockstep/core/error.h"

namespace lockstep::keras::optimizers {

namespace {

// RMSprop's per-step constants (StepInfo::set_constants).
struct RmspropConstants {
  float learning_rate, rho, one_minus_rho, epsilon, momentum;
};

// RMSprop's rule for one element (elementwise_rule.h); slots "velocity", then "momentum" and
// "average_gradient" when those options are on.
template <bool kMomentum, bool kCentered>
struct RmspropRule : RmspropConstants {
  static constexpr size_t kSlots = 1 + (kMomentum ? 1 : 0) + (kCentered ? 1 : 0);
  [[gnu::always_inline]] float operator()(float w, float g, std::array<float, kSlots>& s) const {
    const float v = rho * s[0] + one_minus_rho * g * g;
    s[0] = v;
    float d = v + epsilon;
    if constexpr (kCentered) {
      constexpr size_t a = kMomentum ? 2 : 1;
      s[a] = rho * s[a] + one_minus_rho * g;
      d = v - s[a] * s[a] + epsilon;
    }
    const float increment = learning_rate * g / std::sqrt(d);
    if constexpr (kMomentum) {
      s[1] = momentum * s[1] + increment;
      return w - s[1];
    }
    return w - increment;
  }
};

}  // namespace

RMSprop::RMSprop(RMSpropOptions options) : OptimizerImpl(std::move(options)) {
  LOCKSTEP_CHECK(o_.momentum >= 0.0,
                 "RMSprop: expected momentum >= 0. Received: momentum=", o_.momentum);
}

std::vector<std::string> RMSprop::slot_names() const {
  std::vector<std::string> names{"velocity"};
  if (o_.momentum > 0.0) names.push_back("momentum");
  if (o_.centered) names.push_back("average_gradient");
  return names;
}

void RMSprop::prepare_step(StepInfo& info) const {
  info.set_constants(RmspropConstants{.learning_rate = static_cast<float>(info.learning_rate),
                                      .rho = static_cast<float>(o_.rho),
                                      .one_minus_rho = static_cast<float>(1.0 - o_.rho),
                                      .epsilon = static_cast<float>(o_.epsilon),
                                      .momentum = static_cast<float>(o_.momentum)});
}

void RMSprop::update_step(const UpdateSpan& span, const StepInfo& info) const {
  const auto k = info.constants<RmspropConstants>();
  const bool momentum = o_.momentum > 0.0;
  if (momentum && o_.centered) return detail::run_rule(RmspropRule<true, true>{k}, span);
  if (momentum) return detail::run_rule(RmspropRule<true, false>{k}, span);
  if (o_.centered) return detail::run_rule(RmspropRule<false, true>{k}, span);
  detail::run_rule(RmspropRule<false, false>{k}, span);
}

nlohmann::json RMSprop::get_config() const {
  nlohmann::json c = Optimizer::get_config();
  c["rho"] = o_.rho;
  c["momentum"] = o_.momentum;
  c["epsilon"] = o_.epsilon;
  c["centered"] = o_.centered;
  return c;
}

}  // namespace lockstep::keras::optimizers
