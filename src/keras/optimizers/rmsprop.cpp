#include "lockstep/keras/optimizers/rmsprop.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "lockstep/core/error.h"

namespace lockstep::keras::optimizers {

namespace {

// One loop per (momentum, centered) combination so the element loop has no branches.
template <bool kMomentum, bool kCentered>
void rmsprop_loop(float* __restrict w, const float* __restrict g, float* __restrict vel,
                  float* __restrict mom, float* __restrict avg, size_t n, const float* c) {
  const float lr = c[0], rho = c[1], one_minus_rho = c[2], eps = c[3], mu = c[4];
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

RMSprop::RMSprop(RMSpropOptions options)
    : Optimizer(common_options(options)), o_(std::move(options)) {
  if (!(o_.momentum >= 0.0)) {
    throw InvalidArgument("RMSprop: expected momentum >= 0. Received: momentum=" +
                          std::to_string(o_.momentum));
  }
}

std::vector<std::string> RMSprop::slot_names() const {
  std::vector<std::string> names{"velocity"};
  if (o_.momentum > 0.0) names.push_back("momentum");
  if (o_.centered) names.push_back("average_gradient");
  return names;
}

void RMSprop::prepare_step(StepInfo& info) const {
  info.c[0] = static_cast<float>(info.learning_rate);
  info.c[1] = static_cast<float>(o_.rho);
  info.c[2] = static_cast<float>(1.0 - o_.rho);
  info.c[3] = static_cast<float>(o_.epsilon);
  info.c[4] = static_cast<float>(o_.momentum);
}

void RMSprop::update_step(float* w, const float* g, std::span<float* const> slots, size_t n,
                          const StepInfo& info) const {
  const bool momentum = o_.momentum > 0.0;
  float* vel = slots[0];
  float* mom = momentum ? slots[1] : nullptr;
  float* avg = o_.centered ? slots[momentum ? 2 : 1] : nullptr;
  if (momentum && o_.centered) return rmsprop_loop<true, true>(w, g, vel, mom, avg, n, info.c);
  if (momentum) return rmsprop_loop<true, false>(w, g, vel, mom, avg, n, info.c);
  if (o_.centered) return rmsprop_loop<false, true>(w, g, vel, mom, avg, n, info.c);
  rmsprop_loop<false, false>(w, g, vel, mom, avg, n, info.c);
}

nlohmann::json RMSprop::get_config() const {
  nlohmann::json c = Optimizer::get_config();
  c["rho"] = o_.rho;
  c["momentum"] = o_.momentum;
  c["epsilon"] = o_.epsilon;
  c["centered"] = o_.centered;
  return c;
}

std::unique_ptr<Optimizer> RMSprop::clone() const {
  RMSpropOptions o = o_;
  if (!o.learning_rate.is_schedule()) o.learning_rate = learning_rate();
  return std::make_unique<RMSprop>(o);
}

}  // namespace lockstep::keras::optimizers
