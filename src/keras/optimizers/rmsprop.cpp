#include "lockstep/keras/optimizers/rmsprop.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "lockstep/core/check.h"
#include "lockstep/core/error.h"

namespace lockstep::keras::optimizers {

namespace {

// RMSprop's per-step constants (StepInfo::set_constants).
struct RmspropConstants {
  float learning_rate, rho, one_minus_rho, epsilon, momentum;
};

// One loop per (momentum, centered) combination so the element loop has no branches.
template <bool kMomentum, bool kCentered>
void rmsprop_loop(float* __restrict w, const float* __restrict g, float* __restrict vel,
                  float* __restrict mom, float* __restrict avg, size_t n,
                  const RmspropConstants& k) {
  const float lr = k.learning_rate, rho = k.rho, one_minus_rho = k.one_minus_rho, eps = k.epsilon,
              mu = k.momentum;
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float vi = rho * vel[i] + one_minus_rho * gi * gi;
    vel[i] = vi;
    float d = vi + eps;
    if constexpr (kCentered) {
      const float ai = rho * avg[i] + one_minus_rho * gi;
      avg[i] = ai;
      d = vi - ai * ai + eps;
    }
    const float inc = lr * gi / std::sqrt(d);
    if constexpr (kMomentum) {
      const float mi = mu * mom[i] + inc;
      mom[i] = mi;
      w[i] -= mi;
    } else {
      w[i] -= inc;
    }
  }
}

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

void RMSprop::update_step(float* w, const float* g, std::span<float* const> slots, size_t n,
                          const StepInfo& info) const {
  const bool momentum = o_.momentum > 0.0;
  const auto k = info.constants<RmspropConstants>();
  float* vel = slots[0];
  float* mom = momentum ? slots[1] : nullptr;
  float* avg = o_.centered ? slots[momentum ? 2 : 1] : nullptr;
  if (momentum && o_.centered) return rmsprop_loop<true, true>(w, g, vel, mom, avg, n, k);
  if (momentum) return rmsprop_loop<true, false>(w, g, vel, mom, avg, n, k);
  if (o_.centered) return rmsprop_loop<false, true>(w, g, vel, mom, avg, n, k);
  rmsprop_loop<false, false>(w, g, vel, mom, avg, n, k);
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
