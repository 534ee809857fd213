#include "lockstep/keras/optimizers/sgd.h"

#include <nlohmann/json.hpp>

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
}  // namespace

void SGD::prepare_step(StepInfo& info) const {
  info.set_constants(SgdConstants{.learning_rate = static_cast<float>(info.learning_rate),
                                  .momentum = static_cast<float>(o_.momentum)});
}

void SGD::update_step(float* __restrict w, const float* __restrict g, std::span<float* const> slots,
                      size_t n, const StepInfo& info) const {
  const auto k = info.constants<SgdConstants>();
  const float lr = k.learning_rate, mu = k.momentum;
  if (slots.empty()) {
    for (size_t i = 0; i < n; ++i) w[i] -= g[i] * lr;
    return;
  }
  float* __restrict m = slots[0];
  if (o_.nesterov) {
    for (size_t i = 0; i < n; ++i) {
      const float mi = m[i] * mu - g[i] * lr;
      m[i] = mi;
      w[i] += mi * mu - g[i] * lr;
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const float mi = m[i] * mu - g[i] * lr;
      m[i] = mi;
      w[i] += mi;
    }
  }
}

nlohmann::json SGD::get_config() const {
  nlohmann::json c = Optimizer::get_config();
  c["momentum"] = o_.momentum;
  c["nesterov"] = o_.nesterov;
  return c;
}

}  // namespace lockstep::keras::optimizers
