#include "lockstep/keras/optimizers/sgd.h"

#include <array>
#include <nlohmann/json.hpp>

#include "dispatched_rule.h"
#include "lockstep/core/check.h"
#include "lockstep/core/error.h"

namespace lockstep::keras::optimizers {

SGD::SGD(SGDOptions options) : OptimizerImpl(std::move(options)) {
  LOCKSTEP_CHECK(o_.momentum >= 0.0 && o_.momentum <= 1.0,
                 "SGD: expected momentum in [0, 1]. Received: momentum=", o_.momentum);
}

std::vector<std::string> SGD::slot_names() const {
  if (o_.momentum > 0.0) return {"momentum"};
  return {};
}

namespace {
// SGD's per-step constants (StepInfo::set_constants).
struct SgdConstants {
  float learning_rate, momentum;
};

enum class SgdKind { plain, momentum, nesterov };

// SGD's rule for one element (elementwise_rule.h); slot "momentum" unless plain.
template <SgdKind kKind>
struct SgdRule : SgdConstants {
  static constexpr size_t kSlots = kKind == SgdKind::plain ? 0 : 1;
  [[gnu::always_inline]] float operator()(float w, float g, std::array<float, kSlots>& s) const {
    if constexpr (kKind == SgdKind::plain) {
      return w - g * learning_rate;
    } else {
      s[0] = s[0] * momentum - g * learning_rate;
      if constexpr (kKind == SgdKind::nesterov) return w + (s[0] * momentum - g * learning_rate);
      return w + s[0];
    }
  }
};
}  // namespace

void SGD::prepare_step(StepInfo& info) const {
  info.set_constants(SgdConstants{.learning_rate = static_cast<float>(info.learning_rate),
                                  .momentum = static_cast<float>(o_.momentum)});
}

void SGD::update_step(const UpdateSpan& span, const StepInfo& info) const {
  const auto k = info.constants<SgdConstants>();
  if (o_.momentum == 0.0) return detail::run_rule(SgdRule<SgdKind::plain>{k}, span);
  if (o_.nesterov) return detail::run_rule(SgdRule<SgdKind::nesterov>{k}, span);
  detail::run_rule(SgdRule<SgdKind::momentum>{k}, span);
}

nlohmann::json SGD::get_config() const {
  nlohmann::json c = Optimizer::get_config();
  c["momentum"] = o_.momentum;
  c["nesterov"] = o_.nesterov;
  return c;
}

}  // namespace lockstep::keras::optimizers
