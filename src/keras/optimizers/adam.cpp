#include "lockstep/keras/optimizers/adam.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>

#include "dispatched_rule.h"
#include "lockstep/core/check.h"
#include "lockstep/keras/optimizers/adamw.h"

namespace lockstep::keras::optimizers {

Adam::Adam(AdamOptions options) : OptimizerImpl(std::move(options)) {}

std::vector<std::string> Adam::slot_names() const {
  if (o_.amsgrad) return {"m", "v", "v_hat"};
  return {"m", "v"};
}

namespace {
// Adam's per-step constants (StepInfo::set_constants).
struct AdamConstants {
  float alpha, one_minus_beta_1, one_minus_beta_2, epsilon;
};

// Adam's rule for one element (elementwise_rule.h); slots m, v and, with amsgrad, v_hat.
template <bool kAmsgrad>
struct AdamRule : AdamConstants {
  static constexpr size_t kSlots = kAmsgrad ? 3 : 2;
  [[gnu::always_inline]] float operator()(float w, float g, std::array<float, kSlots>& s) const {
    const float m = s[0] + (g - s[0]) * one_minus_beta_1;
    const float v = s[1] + (g * g - s[1]) * one_minus_beta_2;
    s[0] = m;
    s[1] = v;
    if constexpr (kAmsgrad) {
      s[2] = std::max(s[2], v);
      return w - m * alpha / (std::sqrt(s[2]) + epsilon);
    }
    return w - m * alpha / (std::sqrt(v) + epsilon);
  }
};
}  // namespace

void Adam::prepare_step(StepInfo& info) const {
  const double t = static_cast<double>(info.step);
  const double alpha =
      info.learning_rate * std::sqrt(1.0 - std::pow(o_.beta_2, t)) / (1.0 - std::pow(o_.beta_1, t));
  info.set_constants(AdamConstants{.alpha = static_cast<float>(alpha),
                                   .one_minus_beta_1 = static_cast<float>(1.0 - o_.beta_1),
                                   .one_minus_beta_2 = static_cast<float>(1.0 - o_.beta_2),
                                   .epsilon = static_cast<float>(o_.epsilon)});
}

void Adam::update_step(const UpdateSpan& span, const StepInfo& info) const {
  const auto k = info.constants<AdamConstants>();
  if (o_.amsgrad) return detail::run_rule(AdamRule<true>{k}, span);
  detail::run_rule(AdamRule<false>{k}, span);
}

nlohmann::json Adam::get_config() const {
  nlohmann::json c = Optimizer::get_config();
  c["beta_1"] = o_.beta_1;
  c["beta_2"] = o_.beta_2;
  c["epsilon"] = o_.epsilon;
  c["amsgrad"] = o_.amsgrad;
  return c;
}

namespace {
AdamOptions to_adam(const AdamWOptions& w) {
  LOCKSTEP_CHECK(!w.base.weight_decay,
                 "AdamW: expected weight_decay (AdamW's own option) and base.weight_decay unset. "
                 "Received: base.weight_decay=",
                 *w.base.weight_decay);
  AdamOptions a{.learning_rate = w.learning_rate,
                .beta_1 = w.beta_1,
                .beta_2 = w.beta_2,
                .epsilon = w.epsilon,
                .amsgrad = w.amsgrad,
                .base = w.base,
                .name = w.name};
  a.base.weight_decay = w.weight_decay;
  return a;
}
}  // namespace

AdamW::AdamW(AdamWOptions options) : Adam(to_adam(options)), w_(std::move(options)) {}

std::unique_ptr<Optimizer> AdamW::clone() const {
  AdamWOptions o = w_;
  if (!o.learning_rate.is_schedule()) o.learning_rate = learning_rate();
  return std::make_unique<AdamW>(o);
}

}  // namespace lockstep::keras::optimizers
