#include "lockstep/keras/optimizers/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/check.h"
#include "lockstep/core/error.h"
#include "lockstep/keras/mixed_precision.h"
#include "lockstep/ops/elementwise.h"

namespace lockstep::keras::optimizers {

namespace {

// Elements per chunk when the gradient must be rewritten (clipping) or weight decay applied first:
// small enough to stay in L1 next to the variable and slots, large enough to amortise the call.
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
    total_elements_ += v.num_elements();
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

void Optimizer::apply_gradients(const std::vector<Tensor>& grads,
                                const std::vector<Variable>& vars) {
  if (!built_) build(vars);
  int64_t total = 0;
  for (const Variable& v : vars) total += v.num_elements();
  apply(grads, vars, 0, total, "apply_gradients");
  finish_step();
}

void Optimizer::apply_gradients_range(const std::vector<Tensor>& grads,
                                      const std::vector<Variable>& vars, int64_t begin,
                                      int64_t end) {
  LOCKSTEP_CHECK_AS(FailedPrecondition, built_, "Optimizer '", name(),
                    "'.apply_gradients_range: call build(vars) first (the replicas must not "
                    "race to create slots).");
  apply(grads, vars, begin, end, "apply_gradients_range");
}

void Optimizer::finish_step() {
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

void Optimizer::update_step_rounded(float* var, const float* grad, std::span<float* const> slots,
                                    size_t n, const StepInfo& info, float* rounded) const {
  float* chunk_slots[kMaxSlots] = {};
  for (size_t c0 = 0; c0 < n; c0 += kChunk) {
    const size_t m = std::min(kChunk, n - c0);
    for (size_t s = 0; s < slots.size(); ++s) chunk_slots[s] = slots[s] + c0;
    update_step(var + c0, grad + c0, std::span<float* const>(chunk_slots, slots.size()), m, info);
    round_to_bfloat16_values(var + c0, rounded + c0, m);
  }
}

void Optimizer::apply(const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                      int64_t begin, int64_t end, const char* caller) {
  LOCKSTEP_CHECK(grads.size() == vars.size(), "Optimizer '", name(), "'.", caller,
                 ": expected one gradient per variable. Received: ", grads.size(),
                 " gradients for ", vars.size(), " variables.");
  bool same_order = vars.size() == vars_.size();
  for (size_t i = 0; same_order && i < vars.size(); ++i) same_order = vars[i].same_as(vars_[i]);
  int64_t total = 0;
  for (size_t i = 0; i < vars.size(); ++i) {
    const Variable& v = vars[i];
    total += v.num_elements();
    LOCKSTEP_CHECK(same_order || index_of(v) >= 0, "Optimizer '", name(), "'.", caller,
                   ": unknown variable '", v.name(),
                   "'. This optimizer can only be called for the variables it was built with; "
                   "build() it with every variable first.");
    const Tensor& g = grads[i];
    if (!g.defined()) continue;
    LOCKSTEP_CHECK(g.dtype() == DType::float32 && g.shape() == v.shape(), "Optimizer '", name(),
                   "'.", caller, ": expected a float32 gradient shaped like variable '", v.name(),
                   "' (", v.raw_value().describe(), "). Received: ", g.describe(), ".");
  }
  LOCKSTEP_CHECK(begin >= 0 && begin <= end && end <= total, "Optimizer '", name(), "'.", caller,
                 ": expected 0 <= begin <= end <= ", total,
                 " (the total number of elements). Received: begin=", begin, ", end=", end);

  double global_scale = 1.0;
  if (options_.base.global_clipnorm) {
    double sq = 0.0;
    for (const Tensor& g : grads) {
      if (g.defined()) sq += squared_norm(g);
    }
    double c = *options_.base.global_clipnorm;
    global_scale = c / std::max(std::sqrt(sq), c);
  }

  StepInfo info;
  info.step = iterations() + 1;
  info.learning_rate = learning_rate();
  prepare_step(info);
  const float clip = options_.base.clipvalue ? static_cast<float>(*options_.base.clipvalue) : 0.0f;
  const float wd_lr =
      static_cast<float>(options_.base.weight_decay.value_or(0.0) * info.learning_rate);

  int64_t offset = 0;
  for (size_t i = 0; i < vars.size(); ++i) {
    const int64_t n = vars[i].num_elements();
    const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + n);
    const int64_t start = offset;
    offset += n;
    if (lo >= hi || !grads[i].defined()) continue;
    const int k = same_order ? static_cast<int>(i) : index_of(vars[i]);

    double scale = global_scale;
    if (options_.base.clipnorm) {
      double c = *options_.base.clipnorm;
      scale = c / std::max(std::sqrt(squared_norm(grads[i])), c);
    }
    const size_t local = static_cast<size_t>(lo - start), count = static_cast<size_t>(hi - lo);
    float* w = vars[i].raw_value().data<float>() + local;
    const float* g = grads[i].data<float>() + local;
    float* slot_ptr[kMaxSlots] = {};
    const auto& slots = slots_[static_cast<size_t>(k)];
    for (size_t s = 0; s < slots.size(); ++s) {
      slot_ptr[s] = slots[s].raw_value().data<float>() + local;
    }
    const bool decay = decay_[static_cast<size_t>(k)] != 0;
    // A variable whose bfloat16-rounded copy is in use (mixed_bfloat16 Dense, see
    // mixed_precision::rounded_weights) gets it rewritten here, chunk by chunk while the chunk of
    // updated weights is still in L1, instead of by a full pass over the kernel in the next
    // forward pass.
    float* rounded = mixed_precision::rounded_weights_data(vars[i]);
    if (rounded != nullptr) rounded += local;
    if (scale == 1.0 && !options_.base.clipvalue && !decay) {
      const std::span<float* const> all_slots(slot_ptr, slots.size());
      if (rounded == nullptr) {
        update_step(w, g, all_slots, count, info);
      } else {
        update_step_rounded(w, g, all_slots, count, info, rounded);
      }
      continue;
    }
    const float fscale = static_cast<float>(scale);
    alignas(64) float buffer[kChunk];
    for (size_t c0 = 0; c0 < count; c0 += kChunk) {
      const size_t m = std::min(kChunk, count - c0);
      float* wc = w + c0;
      const float* gc = g + c0;
      if (clip > 0.0f) {
        for (size_t j = 0; j < m; ++j) buffer[j] = std::clamp(gc[j], -clip, clip);
      } else {
        for (size_t j = 0; j < m; ++j) buffer[j] = gc[j] * fscale;
      }
      if (decay) {
        for (size_t j = 0; j < m; ++j) wc[j] -= wc[j] * wd_lr;
      }
      float* chunk_slots[kMaxSlots] = {};
      for (size_t s = 0; s < slots.size(); ++s) chunk_slots[s] = slot_ptr[s] + c0;
      const std::span<float* const> some_slots(chunk_slots, slots.size());
      if (rounded == nullptr) {
        update_step(wc, buffer, some_slots, m, info);
      } else {
        update_step_rounded(wc, buffer, some_slots, m, info, rounded + c0);
      }
    }
  }
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

float* Optimizer::rounded_output(size_t i) const {
  return mixed_precision::next_rounded_weights_data(vars_[static_cast<size_t>(bound_.at(i))]);
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

void Optimizer::update_step_out(const float* var, const float* grad,
                                std::span<const float* const> slots, float* var_out,
                                std::span<float* const> slots_out, size_t n, const StepInfo& info,
                                float* rounded) const {
  if (var_out != var) std::memcpy(var_out, var, n * sizeof(float));
  for (size_t s = 0; s < slots.size(); ++s) std::memcpy(slots_out[s], slots[s], n * sizeof(float));
  if (rounded == nullptr) {
    update_step(var_out, grad, slots_out, n, info);
  } else {
    update_step_rounded(var_out, grad, slots_out, n, info, rounded);
  }
}

void Optimizer::update_step_sum_out(const float* var, const float* grad_a, const float* grad_b,
                                    float* scratch, std::span<const float* const> slots,
                                    float* var_out, std::span<float* const> slots_out, size_t n,
                                    const StepInfo& info, float* rounded) const {
  ops::sum_into(scratch, grad_a, grad_b, static_cast<int64_t>(n));
  update_step_out(var, scratch, slots, var_out, slots_out, n, info, rounded);
}

void Optimizer::apply_sum_of_two(size_t i, int64_t offset, const float* w, const float* a,
                                 const float* b, float* g, std::span<const float* const> slots,
                                 float* w_out, std::span<float* const> slots_out, size_t n,
                                 float* rounded) const {
  // Clipping, scaling and weight decay act on the summed gradient or the weights before the rule:
  // those take the sum-then-apply path.
  if (options_.base.clipvalue || bound_scale_[i] != 1.0f ||
      decay_[static_cast<size_t>(bound_[i])] != 0) {
    ElementwiseUpdate::apply_sum_of_two(i, offset, w, a, b, g, slots, w_out, slots_out, n, rounded);
    return;
  }
  update_step_sum_out(w, a, b, g, slots, w_out, slots_out, n, update_info_, rounded);
}

void Optimizer::apply(size_t i, int64_t /*offset*/, const float* w, float* g,
                      std::span<const float* const> slots, float* w_out,
                      std::span<float* const> slots_out, size_t n, float* rounded) const {
  const int k = bound_[i];
  const float scale = bound_scale_[i];
  if (options_.base.clipvalue) {
    const float clip = static_cast<float>(*options_.base.clipvalue);
    for (size_t j = 0; j < n; ++j) g[j] = std::clamp(g[j], -clip, clip);
  } else if (scale != 1.0f) {
    for (size_t j = 0; j < n; ++j) g[j] *= scale;
  }
  if (decay_[static_cast<size_t>(k)] != 0) {
    // Decoupled weight decay first (w <- w - w * wd * lr), then the rule on the decayed weights.
    const float wd_lr =
        static_cast<float>(options_.base.weight_decay.value_or(0.0) * update_info_.learning_rate);
    for (size_t j = 0; j < n; ++j) w_out[j] = w[j] - w[j] * wd_lr;
    w = w_out;
  }
  update_step_out(w, g, slots, w_out, slots_out, n, update_info_, rounded);
}

}  // namespace lockstep::keras::optimizers
