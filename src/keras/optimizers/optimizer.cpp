#include "lockstep/keras/optimizers/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "lockstep/core/check.h"
#include "lockstep/core/error.h"
#include "lockstep/keras/mixed_precision.h"

namespace lockstep::keras::optimizers {

namespace {

// Elements per apply() in apply_gradients when the gradient is rewritten (clipping) or the weights
// decayed before the rule: small enough to stay in L1 between those passes and the rule's, large
// enough to amortise the call.
constexpr size_t kChunk = 1024;
constexpr int kMaxSlots = 4;

nlohmann::json optional_json(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

void check_positive(const std::optional<double>& v, const char* what) {
  LOCKSTEP_CHECK(!v || *v > 0.0, "Optimizer: expected ", what, " > 0. Received: ", what, "=", *v);
}

double squared_norm(const Tensor& g) {
  const float* p = g.data<float>();
  double s = 0.0;
  for (int64_t i = 0, n = g.num_elements(); i < n; ++i) s += static_cast<double>(p[i]) * p[i];
  return s;
}

}  // namespace

nlohmann::json LearningRate::to_json() const {
  if (schedule_) return schedules::serialize(*schedule_);
  return value_;
}

Optimizer::Optimizer(CommonOptions options) : options_(std::move(options)) {
  int clip_options = (options_.base.clipnorm ? 1 : 0) + (options_.base.clipvalue ? 1 : 0) +
                     (options_.base.global_clipnorm ? 1 : 0);
  LOCKSTEP_CHECK(clip_options <= 1,
                 "Optimizer: only one of clipnorm, clipvalue and global_clipnorm can be set. "
                 "Received: clipnorm=",
                 optional_json(options_.base.clipnorm).dump(),
                 ", clipvalue=", optional_json(options_.base.clipvalue).dump(),
                 ", global_clipnorm=", optional_json(options_.base.global_clipnorm).dump());
  LOCKSTEP_CHECK(
      !options_.base.gradient_accumulation_steps || *options_.base.gradient_accumulation_steps >= 1,
      "Optimizer: expected gradient_accumulation_steps >= 1. Received: "
      "gradient_accumulation_steps=",
      *options_.base.gradient_accumulation_steps);
  check_positive(options_.base.clipnorm, "clipnorm");
  check_positive(options_.base.clipvalue, "clipvalue");
  check_positive(options_.base.global_clipnorm, "global_clipnorm");
  LOCKSTEP_CHECK(!options_.base.weight_decay || *options_.base.weight_decay >= 0.0,
                 "Optimizer: expected weight_decay >= 0. Received: weight_decay=",
                 *options_.base.weight_decay);
  iterations_ = Variable(Tensor::zeros({}, DType::int64), options_.name + "/iterations", false);
  if (!options_.learning_rate.is_schedule()) {
    learning_rate_ = Variable(Tensor::scalar(options_.learning_rate.value(), DType::float64),
                              options_.name + "/learning_rate", false);
  }
}

Optimizer::~Optimizer() = default;

void Optimizer::build(const std::vector<Variable>& vars) {
  if (built_) {
    for (const Variable& v : vars) {
      LOCKSTEP_CHECK_AS(FailedPrecondition, index_of(v) >= 0, "Optimizer '", name(),
                        "': build() was already called, and '", v.name(),
                        "' is not one of its variables. Build once with every variable the "
                        "optimizer will update.");
    }
    return;
  }
  std::vector<std::string> names = slot_names();
  LOCKSTEP_CHECK_AS(Internal, names.size() <= static_cast<size_t>(kMaxSlots), "Optimizer '", name(),
                    "': more than 4 slots per variable.");
  for (size_t i = 0; i < vars.size(); ++i) {
    const Variable& v = vars[i];
    LOCKSTEP_CHECK(v.dtype() == DType::float32, "Optimizer '", name(),
                   "': expected float32 variables. Received: '", v.name(), "' ",
                   v.raw_value().describe(), ".");
    for (size_t j = 0; j < i; ++j) {
      LOCKSTEP_CHECK(!vars[j].same_as(v), "Optimizer '", name(), "': variable '", v.name(),
                     "' is listed twice.");
    }
  }
  for (const Variable& v : vars) {
    std::vector<Variable> slots;
    for (size_t s = 0; s < names.size(); ++s) {
      slots.emplace_back(
          Tensor::full(v.shape(), slot_initial_value(static_cast<int>(s)), DType::float32),
          name() + "/" + names[s] + "/" + v.name(), false);
    }
    slots_.push_back(std::move(slots));
    bool decay = options_.base.weight_decay.has_value() && *options_.base.weight_decay > 0.0;
    for (const std::string& pattern : options_.base.exclude_from_weight_decay) {
      if (v.name().find(pattern) != std::string::npos) decay = false;
    }
    decay_.push_back(decay ? 1 : 0);
  }
  vars_ = vars;
  built_ = true;
}

int Optimizer::index_of(const Variable& v) const {
  for (size_t i = 0; i < vars_.size(); ++i) {
    if (vars_[i].same_as(v)) return static_cast<int>(i);
  }
  return -1;
}

void Optimizer::check_gradients(const std::vector<Tensor>& grads,
                                const std::vector<Variable>& vars) const {
  LOCKSTEP_CHECK(grads.size() == vars.size(), "Optimizer '", name(),
                 "'.apply_gradients: expected one gradient per variable. Received: ", grads.size(),
                 " gradients for ", vars.size(), " variables.");
  for (size_t i = 0; i < vars.size(); ++i) {
    const Variable& v = vars[i];
    LOCKSTEP_CHECK(index_of(v) >= 0, "Optimizer '", name(), "'.apply_gradients: unknown variable '",
                   v.name(),
                   "'. This optimizer can only be called for the variables it was built with; "
                   "build() it with every variable first.");
    const Tensor& g = grads[i];
    if (!g.defined()) continue;
    LOCKSTEP_CHECK(g.dtype() == DType::float32 && g.shape() == v.shape(), "Optimizer '", name(),
                   "'.apply_gradients: expected a float32 gradient shaped like variable '",
                   v.name(), "' (", v.raw_value().describe(), "). Received: ", g.describe(), ".");
  }
}

void Optimizer::apply_gradients(const std::vector<Tensor>& grads,
                                const std::vector<Variable>& vars) {
  if (!built_) build(vars);
  check_gradients(grads, vars);
  // apply_gradients binds its own variables: a training step bound to this optimizer keeps its
  // binding for its next update.
  struct KeepBinding {
    Optimizer& o;
    std::vector<int> bound = std::move(o.bound_);
    std::vector<float> scale = std::move(o.bound_scale_);
    ~KeepBinding() {
      o.bound_ = std::move(bound);
      o.bound_scale_ = std::move(scale);
    }
  } keep{*this};
  bind(vars);
  std::vector<double> squared_norms;
  if (wants_gradient_norms()) {
    for (const Tensor& g : grads) squared_norms.push_back(g.defined() ? squared_norm(g) : 0.0);
  }
  begin_update(squared_norms);
  const bool rewrites = rewrites_gradient();
  for (size_t i = 0; i < vars.size(); ++i) {
    if (!grads[i].defined()) continue;
    float* w = vars[i].raw_value().data<float>();
    const float* g = grads[i].data<float>();
    const std::vector<Variable>& slots = slots_[static_cast<size_t>(bound_[i])];
    const distribute::RoundedOut rounded = mixed_precision::rounded_weights_out(vars[i]);
    const size_t n = static_cast<size_t>(vars[i].num_elements());
    const size_t chunk = rewrites || decay_[static_cast<size_t>(bound_[i])] != 0 ? kChunk : n;
    alignas(64) float scratch[kChunk];
    float* slot_ptr[kMaxSlots] = {};
    for (size_t c0 = 0; c0 < n; c0 += chunk) {
      const size_t m = std::min(chunk, n - c0);
      for (size_t s = 0; s < slots.size(); ++s) {
        slot_ptr[s] = slots[s].raw_value().data<float>() + c0;
      }
      // The caller's gradient stays as it is: when apply() rewrites g, it gets a copy.
      float* gc = const_cast<float*>(g) + c0;
      if (rewrites) {
        std::memcpy(scratch, gc, m * sizeof(float));
        gc = scratch;
      }
      apply(i, static_cast<int64_t>(c0), w + c0, gc, {slot_ptr, slots.size()}, w + c0,
            {slot_ptr, slots.size()}, m, rounded.at(c0), {});
    }
  }
  end_update();
}

void Optimizer::end_update() {
  iterations_.raw_value().data<int64_t>()[0] += 1;
}

int64_t Optimizer::iterations() const {
  return iterations_.raw_value().data<int64_t>()[0];
}

double Optimizer::learning_rate() const {
  if (options_.learning_rate.is_schedule()) {
    return (*options_.learning_rate.schedule())(iterations());
  }
  return learning_rate_.raw_value().data<double>()[0];
}

void Optimizer::set_learning_rate(double value) {
  LOCKSTEP_CHECK_AS(FailedPrecondition, !options_.learning_rate.is_schedule(), "Optimizer '",
                    name(),
                    "': this optimizer was created with a LearningRateSchedule as its "
                    "learning_rate, hence its learning rate is not settable. Received: "
                    "learning_rate=",
                    value);
  learning_rate_.raw_value().data<double>()[0] = value;
}

std::vector<Variable> Optimizer::variables() const {
  std::vector<Variable> out{iterations_};
  if (learning_rate_.defined()) out.push_back(learning_rate_);
  for (const auto& slots : slots_) out.insert(out.end(), slots.begin(), slots.end());
  return out;
}

nlohmann::json Optimizer::get_config() const {
  return {{"name", options_.name},
          {"learning_rate", learning_rate_.defined() ? nlohmann::json(learning_rate())
                                                     : options_.learning_rate.to_json()},
          {"weight_decay", optional_json(options_.base.weight_decay)},
          {"clipnorm", optional_json(options_.base.clipnorm)},
          {"global_clipnorm", optional_json(options_.base.global_clipnorm)},
          {"clipvalue", optional_json(options_.base.clipvalue)},
          {"exclude_from_weight_decay", options_.base.exclude_from_weight_decay},
          {"gradient_accumulation_steps",
           options_.base.gradient_accumulation_steps
               ? nlohmann::json(*options_.base.gradient_accumulation_steps)
               : nlohmann::json()}};
}

void Optimizer::bind(const std::vector<Variable>& vars) {
  if (!built_) build(vars);
  bound_.clear();
  for (const Variable& v : vars) {
    const int k = index_of(v);
    LOCKSTEP_CHECK(k >= 0, "Optimizer '", name(), "': unknown variable '", v.name(),
                   "'. build() it with every variable it will update.");
    bound_.push_back(k);
  }
}

distribute::RoundedOut Optimizer::rounded_output(size_t i) const {
  return mixed_precision::next_rounded_weights_out(vars_[static_cast<size_t>(bound_.at(i))]);
}

distribute::RoundedOut Optimizer::rounded_output_in_place(size_t i) const {
  return mixed_precision::rounded_weights_out(vars_[static_cast<size_t>(bound_.at(i))]);
}

void Optimizer::swap_rounded_output(size_t i, Tensor& spare) {
  mixed_precision::swap_next_rounded_weights(vars_[static_cast<size_t>(bound_.at(i))], spare);
}

std::vector<Variable> Optimizer::slot_variables(size_t i) const {
  return slots_[static_cast<size_t>(bound_.at(i))];
}

bool Optimizer::wants_gradient_norms() const {
  return options_.base.clipnorm.has_value() || options_.base.global_clipnorm.has_value();
}

bool Optimizer::rewrites_gradient() const {
  return options_.base.clipvalue.has_value() || wants_gradient_norms();
}

void Optimizer::begin_update(std::span<const double> squared_norms) {
  update_info_ = StepInfo{};
  update_info_.step = iterations() + 1;
  update_info_.learning_rate = learning_rate();
  prepare_step(update_info_);
  bound_scale_.assign(bound_.size(), 1.0f);
  if (!wants_gradient_norms()) return;
  LOCKSTEP_CHECK_AS(Internal, squared_norms.size() == bound_.size(), "Optimizer '", name(),
                    "'.begin_update: expected ", bound_.size(), " squared norms. Received ",
                    squared_norms.size(), ".");
  if (options_.base.global_clipnorm) {
    double sq = 0.0;
    for (double v : squared_norms) sq += v;
    const double c = *options_.base.global_clipnorm;
    std::fill(bound_scale_.begin(), bound_scale_.end(),
              static_cast<float>(c / std::max(std::sqrt(sq), c)));
  } else {
    const double c = *options_.base.clipnorm;
    for (size_t i = 0; i < bound_.size(); ++i)
      bound_scale_[i] = static_cast<float>(c / std::max(std::sqrt(squared_norms[i]), c));
  }
}

void Optimizer::apply_sum_of_two(size_t i, int64_t offset, const float* w, const float* a,
                                 const float* b, float* g, std::span<const float* const> slots,
                                 float* w_out, std::span<float* const> slots_out, size_t n,
                                 distribute::RoundedOut rounded,
                                 distribute::Streamed streamed) const {
  // Clipping, scaling and weight decay act on the summed gradient or the weights before the rule:
  // those take the sum-then-apply path.
  if (options_.base.clipvalue || bound_scale_[i] != 1.0f ||
      decay_[static_cast<size_t>(bound_[i])] != 0) {
    ElementwiseUpdate::apply_sum_of_two(i, offset, w, a, b, g, slots, w_out, slots_out, n, rounded,
                                        streamed);
    return;
  }
  update_step(UpdateSpan{w, a, b, slots, w_out, slots_out, rounded, n, streamed}, update_info_);
}

void Optimizer::apply_sum_of_two(size_t i, int64_t offset, const float* w, const bfloat16* a,
                                 const bfloat16* b, float* g, std::span<const float* const> slots,
                                 float* w_out, std::span<float* const> slots_out, size_t n,
                                 distribute::RoundedOut rounded,
                                 distribute::Streamed streamed) const {
  if (!reads_bfloat16_gradient_pairs() || options_.base.clipvalue || bound_scale_[i] != 1.0f ||
      decay_[static_cast<size_t>(bound_[i])] != 0) {
    ElementwiseUpdate::apply_sum_of_two(i, offset, w, a, b, g, slots, w_out, slots_out, n, rounded,
                                        streamed);
    return;
  }
  update_step(UpdateSpan{w, nullptr, nullptr, slots, w_out, slots_out, rounded, n, streamed, a, b},
              update_info_);
}

void Optimizer::apply(size_t i, int64_t /*offset*/, const float* w, float* g,
                      std::span<const float* const> slots, float* w_out,
                      std::span<float* const> slots_out, size_t n, distribute::RoundedOut rounded,
                      distribute::Streamed streamed) const {
  const float scale = bound_scale_[i];
  if (options_.base.clipvalue) {
    const float clip = static_cast<float>(*options_.base.clipvalue);
    for (size_t j = 0; j < n; ++j) g[j] = std::clamp(g[j], -clip, clip);
  } else if (scale != 1.0f) {
    for (size_t j = 0; j < n; ++j) g[j] *= scale;
  }
  if (decay_[static_cast<size_t>(bound_[i])] != 0) {
    // Decoupled weight decay first (w <- w - w * wd * lr), then the rule on the decayed weights.
    const float wd_lr =
        static_cast<float>(options_.base.weight_decay.value_or(0.0) * update_info_.learning_rate);
    for (size_t j = 0; j < n; ++j) w_out[j] = w[j] - w[j] * wd_lr;
    w = w_out;
  }
  update_step(UpdateSpan{w, g, nullptr, slots, w_out, slots_out, rounded, n, streamed},
              update_info_);
}

}  // namespace lockstep::keras::optimizers
