#pragma once
// Optimizer: the base of keras.optimizers. It owns everything optimizers share — the iteration
// count, the learning rate (a constant or a schedule), slot variables, gradient clipping and
// decoupled weight decay — and each optimizer writes only its elementwise rule
// (keras/optimizers/elementwise_rule.h) and the `update_step` that runs it over a span of
// elements.
//
// One step, for every (gradient g, variable w) pair, in Keras' order:
//   lr = learning_rate(iterations)                  (a schedule is evaluated at `iterations`)
//   clipnorm c:        g <- g * c / max(||g||_2, c)            per variable
//   global_clipnorm c: g <- g * c / max(sqrt(sum_v ||g_v||^2), c)   over all variables
//   clipvalue c:       g <- clip(g, -c, c)                     elementwise
//   weight_decay wd:   w <- w - w * wd * lr                    (variables not excluded)
//   w, slots <- rule(w, g, slots)                              (the optimizer's, elementwise)
//   iterations += 1
// Only one of clipnorm, global_clipnorm and clipvalue may be set (as in Keras 3). Gradient norms
// are accumulated in double (Keras: float32), in a fixed order, so every replica that computes
// them gets the same factor.
//
// Variables and gradients are float32 (mixed precision keeps float32 variables). An undefined
// gradient (Tensor{}) skips its variable, as Keras skips None gradients.
//
// One path: the optimizer is an ElementwiseUpdate (distribute/elementwise_update.h). The strategy's
// training step sums the replicas' gradients and calls begin_update, then apply() on chunks of
// each variable from any thread, then end_update; apply_gradients makes the same calls on the
// whole of each variable, in place. The update of an element depends only on that element (and
// its slots), so any split gives the bits of apply_gradients.
#include <concepts>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "lockstep/autodiff/variable.h"
#include "lockstep/core/tensor.h"
#include "lockstep/distribute/elementwise_update.h"
#include "lockstep/keras/optimizers/elementwise_rule.h"
#include "lockstep/keras/optimizers/schedules/learning_rate_schedule.h"

namespace lockstep::keras::optimizers {

// A constant learning rate or a schedule; converts implicitly from either, so options read
// `.learning_rate = 1e-3` or `.learning_rate = std::make_shared<schedules::ExponentialDecay>(...)`.
class LearningRate {
 public:
  LearningRate(double value) : value_(value) {}  // NOLINT(google-explicit-constructor)
  template <typename S>
  requires std::derived_from<S, schedules::LearningRateSchedule> LearningRate(
      std::shared_ptr<S> schedule)  // NOLINT(google-explicit-constructor)
      : schedule_(std::move(schedule)) {}

  bool is_schedule() const { return schedule_ != nullptr; }
  double value() const { return value_; }
  const std::shared_ptr<schedules::LearningRateSchedule>& schedule() const { return schedule_; }
  nlohmann::json to_json() const;

 private:
  double value_ = 0.0;
  std::shared_ptr<schedules::LearningRateSchedule> schedule_;
};

// The options every optimizer shares besides its learning rate and name, whose defaults differ
// (Keras' BaseOptimizer arguments): gradient clipping, decoupled weight decay and gradient
// accumulation. Each optimizer's options hold them as `base`:
// `Adam({.learning_rate = 3e-4, .base = {.global_clipnorm = 1.0}})`.
struct BaseOptions {
  std::optional<double> weight_decay{};
  std::optional<double> clipnorm{};
  std::optional<double> clipvalue{};
  std::optional<double> global_clipnorm{};
  // Variables whose name contains one of these substrings get no weight decay
  // (Keras: exclude_from_weight_decay(var_names=...)).
  std::vector<std::string> exclude_from_weight_decay{};
  // Keras 3's gradient_accumulation_steps: when set (> 1), fit updates the variables every N
  // steps with the average of the N steps' gradients; replicas communicate only on those steps
  // (the strategy's step accumulates locally, DDP's no_sync). iterations counts updates.
  std::optional<int> gradient_accumulation_steps{};
};

// What the base class keeps of an optimizer's options.
struct CommonOptions {
  LearningRate learning_rate = 0.001;
  std::string name{};
  BaseOptions base{};
};

template <typename Options>
CommonOptions common_options(const Options& o) {
  return {o.learning_rate, o.name, o.base};
}

// Per-step values handed to update_step. An optimizer's own per-step constants (Adam's alpha,
// 1 - beta_1, ...) are a struct of its own, computed once per update by prepare_step so that the
// element loops do no pow/sqrt of scalars: prepare_step calls set_constants(k), update_step reads
// constants<K>().
struct StepInfo {
  double learning_rate = 0.0;
  int64_t step = 1;  // iterations + 1 (Keras' local_step)

  template <typename K>
  void set_constants(const K& k) {
    static_assert(std::is_trivially_copyable_v<K> && sizeof(K) <= kConstantBytes);
    std::memcpy(constants_, &k, sizeof(K));
  }
  template <typename K>
  K constants() const {
    static_assert(std::is_trivially_copyable_v<K> && sizeof(K) <= kConstantBytes);
    K k;
    std::memcpy(&k, constants_, sizeof(K));
    return k;
  }

 private:
  static constexpr size_t kConstantBytes = 32;
  alignas(8) unsigned char constants_[kConstantBytes] = {};
};

class Optimizer : public distribute::ElementwiseUpdate {
 public:
  ~Optimizer() override;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Creates the slot variables (float32, zeros or the optimizer's initial value, named
  // "<optimizer>/<slot>/<variable>", e.g. "adam/m/dense/kernel"). Idempotent for the same list.
  void build(const std::vector<Variable>& vars);
  bool built() const { return built_; }

  // Keras apply_gradients(zip(grads, vars)): builds on the first call, updates, and increments
  // iterations. `vars` may be any subset of the built variables.
  void apply_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars);

  int64_t iterations() const;
  // The learning rate of the next step (a schedule evaluated at iterations()).
  double learning_rate() const;
  // Sets a constant learning rate (LearningRateScheduler). Throws FailedPrecondition when the
  // optimizer was created with a schedule, as Keras does.
  void set_learning_rate(double value);

  // iterations, the learning rate (when constant) and every slot, in a fixed order: the state a
  // checkpoint saves and restores (restore by assign() into these handles).
  std::vector<Variable> variables() const;

  const std::string& name() const { return options_.name; }
  // 1 unless gradient_accumulation_steps was set.
  int gradient_accumulation_steps() const {
    return options_.base.gradient_accumulation_steps.value_or(1);
  }
  virtual nlohmann::json get_config() const;
  // A fresh, unbuilt optimizer with the same configuration (for compile() taking a prototype).
  virtual std::unique_ptr<Optimizer> clone() const = 0;

  // ---- distribute::ElementwiseUpdate (the strategy's training step, and apply_gradients).
  // bind() builds the optimizer for `vars` if needed. Besides out of place, apply() and
  // apply_sum_of_two() update in place: w_out may be w and slots_out slots (the same arrays).
  void bind(const std::vector<Variable>& vars) override;
  std::vector<Variable> slot_variables(size_t i) const override;
  bool wants_gradient_norms() const override;
  bool rewrites_gradient() const override;
  void begin_update(std::span<const double> squared_norms) override;
  void apply(size_t i, int64_t offset, const float* w, float* g,
             std::span<const float* const> slots, float* w_out, std::span<float* const> slots_out,
             size_t n, distribute::RoundedOut rounded,
             distribute::Streamed streamed) const override;
  void apply_sum_of_two(size_t i, int64_t offset, const float* w, const float* a, const float* b,
                        float* g, std::span<const float* const> slots, float* w_out,
                        std::span<float* const> slots_out, size_t n, distribute::RoundedOut rounded,
                        distribute::Streamed streamed) const override;
  void apply_sum_of_two(size_t i, int64_t offset, const float* w, const bfloat16* a,
                        const bfloat16* b, float* g, std::span<const float* const> slots,
                        float* w_out, std::span<float* const> slots_out, size_t n,
                        distribute::RoundedOut rounded,
                        distribute::Streamed streamed) const override;
  void end_update() override;
  // The variable's bfloat16-rounded copy (mixed_precision::next_rounded_weights_out) when the
  // policy keeps one, so that the update rewrites it instead of the next forward pass.
  distribute::RoundedOut rounded_output(size_t i) const override;
  distribute::RoundedOut rounded_output_in_place(size_t i) const override;
  bool swaps_rounded_output() const override { return true; }
  void swap_rounded_output(size_t i, Tensor& spare) override;

 protected:
  explicit Optimizer(CommonOptions options);

  // Slot names, in the order the rule receives them.
  virtual std::vector<std::string> slot_names() const { return {}; }
  virtual float slot_initial_value(int /*slot*/) const { return 0.0f; }
  // Stores the optimizer's per-step constants in `info` (StepInfo::set_constants); called once
  // per update.
  virtual void prepare_step(StepInfo& /*info*/) const {}
  // Runs the optimizer's rule over `span` (the gradient already clipped, the weights already
  // decayed) with expand_rule (elementwise_rule.h): one call per span, none per element. Must
  // depend on nothing but the span's elements and `info`: the step's split relies on it.
  virtual void update_step(const UpdateSpan& span, const StepInfo& info) const = 0;
  // Whether update_step reads UpdateSpan::gb/gb2 (two bfloat16 gradients) — it does when it runs
  // its rule through expand_rule, as the built-in optimizers do; otherwise (the default) such
  // gradients are widened and summed into a float32 span first.
  virtual bool reads_bfloat16_gradient_pairs() const { return false; }

  const CommonOptions& common() const { return options_; }

 private:
  void check_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) const;
  int index_of(const Variable& v) const;

  CommonOptions options_;
  Variable iterations_;
  Variable learning_rate_;  // float64 scalar; undefined when a schedule drives the rate
  bool built_ = false;
  std::vector<Variable> vars_;
  std::vector<std::vector<Variable>> slots_;  // [variable][slot]
  std::vector<char> decay_;                   // weight decay applies to variable i
  // ElementwiseUpdate state: the bound variables' indices in vars_ and their gradients' clipping
  // factors (begin_update), and the step's constants.
  std::vector<int> bound_;
  std::vector<float> bound_scale_;
  StepInfo update_info_;
};

// What an optimizer gets from its options type alone: keeping them (o_, options()) and clone().
// An optimizer derives from OptimizerImpl<Itself, ItsOptions> (as a layer from LayerImpl).
template <typename Derived, typename Options>
class OptimizerImpl : public Optimizer {
 public:
  const Options& options() const { return o_; }
  // A fresh, unbuilt copy whose learning rate is the current one (a schedule stays a schedule).
  std::unique_ptr<Optimizer> clone() const override {
    Options o = o_;
    if (!o.learning_rate.is_schedule()) o.learning_rate = learning_rate();
    return std::make_unique<Derived>(o);
  }

 protected:
  explicit OptimizerImpl(Options options)
      : Optimizer(common_options(options)), o_(std::move(options)) {}
  Options o_;
};

}  // namespace lockstep::keras::optimizers
