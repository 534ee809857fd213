#include "lockstep/keras/optimizers/sgd.h"

#include <nlohmann/json.hpp>

#include "lockstep/core/error.h"

namespace lockstep::keras::optimizers {

SGD::SGD(SGDOptions options) : Optimizer(common_options(options)), o_(std::move(options)) {
  if (!(o_.momentum >= 0.0 && o_.momentum <= 1.0)) {
    throw InvalidArgument("SGD: expected momentum in [0, 1]. Received: momentum=" +
                          std::to_string(o_.momentum));
  }
}

std::vector<std::string> SGD::slot_names() const {
  if (o_.momentum > 0.0) return {"momentum"};
  return {};
}

void SGD::prepare_step(StepInfo& info) const {
  info.c[0] = static_cast<float>(info.learning_rate);
  info.c[1] = static_cast<float>(o_.momentum);
}

void SGD::update_step(float* __restrict w, const float* __restrict g, std::span<float* const> slots,
                      size_t n, const StepInfo& info) const {
  const float lr = info.c[0], mu = info.c[1];
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

std::unique_ptr<Optimizer> SGD::clone() const {
  SGDOptions o = o_;
  if (!o.learning_rate.is_schedule()) o.learning_rate = learning_rate();
  return std::make_unique<SGD>(o);
}

}  // namespace lockstep::keras::optimizers
