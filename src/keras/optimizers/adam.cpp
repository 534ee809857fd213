#include "lockstep/keras/optimizers/adam.h"
#include "core/cpu_dispatch.h"
#include "lockstep/core/bfloat16.h"
#include "lockstep/core/check.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

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

namespace {
// The update of every step, one pass over the weights: built for each ISA level and chosen once,
// under the ISA cap (core/cpu_dispatch.h). Same arithmetic in every build, element by element (no
// FMA contraction), so results depend neither on the CPU nor on where a replica's range starts.
// Every loop below is this element's rule; they differ only in where they read and write.
struct AdamRule {
  float alpha, one_minus_b1, one_minus_b2, eps;
  // The new weight; the new moments go to m_out and v_out.
  [[gnu::always_inline, gnu::optimize("fp-contract=off")]] float operator()(float w, float g,
                                                                            float m, float v,
                                                                            float& m_out,
                                                                            float& v_out) const {
    m_out = m + (g - m) * one_minus_b1;
    v_out = v + (g * g - v) * one_minus_b2;
    return w - m_out * alpha / (std::sqrt(v_out) + eps);
  }
};

LOCKSTEP_DISPATCHED(void, adam_update,
                    (float* __restrict w, const float* __restrict g, float* __restrict m,
                     float* __restrict v, size_t n, AdamRule rule),
                    (w, g, m, v, n, rule)) {
  for (size_t i = 0; i < n; ++i) w[i] = rule(w[i], g[i], m[i], v[i], m[i], v[i]);
}

// adam_update that also writes the new weights' bfloat16 rounding
// (mixed_precision::rounded_weights): the rounding rides along the update's loop instead of a
// second pass over the weights.
LOCKSTEP_DISPATCHED(void, adam_update_rounded,
                    (float* __restrict w, const float* __restrict g, float* __restrict m,
                     float* __restrict v, float* __restrict rounded, size_t n, AdamRule rule),
                    (w, g, m, v, rounded, n, rule)) {
  for (size_t i = 0; i < n; ++i) {
    w[i] = rule(w[i], g[i], m[i], v[i], m[i], v[i]);
    rounded[i] = round_to_bfloat16_value(w[i]);
  }
}

// adam_update reading (w, m, v) and writing (wo, mo, vo): the training step's out-of-place form
// (the old values stay readable by a concurrent run of the same chunk). The gradient is g0[i],
// or g0[i] + g1[i] when g1 is not nullptr (the sum of two replicas', added as it is read: the
// same bits as a separate sum pass). wo may be w.
LOCKSTEP_DISPATCHED(void, adam_update_out,
                    (const float* w, const float* __restrict g0, const float* __restrict g1,
                     const float* __restrict m, const float* __restrict v, float* wo,
                     float* __restrict mo, float* __restrict vo, float* __restrict rounded,
                     size_t n, AdamRule rule),
                    (w, g0, g1, m, v, wo, mo, vo, rounded, n, rule)) {
  if (g1 == nullptr && rounded == nullptr) {
    for (size_t i = 0; i < n; ++i) wo[i] = rule(w[i], g0[i], m[i], v[i], mo[i], vo[i]);
  } else if (g1 == nullptr) {
    for (size_t i = 0; i < n; ++i) {
      wo[i] = rule(w[i], g0[i], m[i], v[i], mo[i], vo[i]);
      rounded[i] = round_to_bfloat16_value(wo[i]);
    }
  } else if (rounded == nullptr) {
    for (size_t i = 0; i < n; ++i) wo[i] = rule(w[i], g0[i] + g1[i], m[i], v[i], mo[i], vo[i]);
  } else {
    for (size_t i = 0; i < n; ++i) {
      wo[i] = rule(w[i], g0[i] + g1[i], m[i], v[i], mo[i], vo[i]);
      rounded[i] = round_to_bfloat16_value(wo[i]);
    }
  }
}

AdamRule rule_of(const StepInfo& info) {
  const auto k = info.constants<AdamConstants>();
  return {k.alpha, k.one_minus_beta_1, k.one_minus_beta_2, k.epsilon};
}
}  // namespace

void Adam::update_step_out(const float* w, const float* g, std::span<const float* const> slots,
                           float* w_out, std::span<float* const> slots_out, size_t n,
                           const StepInfo& info, float* rounded) const {
  if (o_.amsgrad) {
    Optimizer::update_step_out(w, g, slots, w_out, slots_out, n, info, rounded);
    return;
  }
  adam_update_out(w, g, nullptr, slots[0], slots[1], w_out, slots_out[0], slots_out[1], rounded, n,
                  rule_of(info));
}

void Adam::update_step_sum_out(const float* w, const float* grad_a, const float* grad_b,
                               float* scratch, std::span<const float* const> slots, float* w_out,
                               std::span<float* const> slots_out, size_t n, const StepInfo& info,
                               float* rounded) const {
  if (o_.amsgrad) {
    Optimizer::update_step_sum_out(w, grad_a, grad_b, scratch, slots, w_out, slots_out, n, info,
                                   rounded);
    return;
  }
  adam_update_out(w, grad_a, grad_b, slots[0], slots[1], w_out, slots_out[0], slots_out[1], rounded,
                  n, rule_of(info));
}

void Adam::update_step_rounded(float* __restrict w, const float* __restrict g,
                               std::span<float* const> slots, size_t n, const StepInfo& info,
                               float* __restrict rounded) const {
  if (o_.amsgrad) {
    Optimizer::update_step_rounded(w, g, slots, n, info, rounded);
    return;
  }
  adam_update_rounded(w, g, slots[0], slots[1], rounded, n, rule_of(info));
}

void Adam::update_step(float* __restrict w, const float* __restrict g,
                       std::span<float* const> slots, size_t n, const StepInfo& info) const {
  float* __restrict m = slots[0];
  float* __restrict v = slots[1];
  if (!o_.amsgrad) {
    adam_update(w, g, m, v, n, rule_of(info));
    return;
  }
  const auto k = info.constants<AdamConstants>();
  const float alpha = k.alpha, one_minus_b1 = k.one_minus_beta_1, one_minus_b2 = k.one_minus_beta_2,
              eps = k.epsilon;
  float* __restrict vhat = slots[2];
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = m[i] + (gi - m[i]) * one_minus_b1;
    const float vi = v[i] + (gi * gi - v[i]) * one_minus_b2;
    const float hi = std::max(vhat[i], vi);
    m[i] = mi;
    v[i] = vi;
    vhat[i] = hi;
    w[i] -= mi * alpha / (std::sqrt(hi) + eps);
  }
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
