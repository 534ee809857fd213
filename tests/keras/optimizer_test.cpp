// Each optimizer against an independent float64 loop written here from Keras' update rules.
//
// Tolerance: the float32 run and the float64 reference start from the same float32 weights and
// gradients, so they differ only by float32 rounding in the update: a handful of roundings of
// ~6e-8 relative per step on weights of magnitude ~1, i.e. < 1e-6 after 5 steps. A wrong rule
// (a missing bias correction, epsilon outside the root, decay after instead of before) moves
// weights by ~lr * 1e-1 or more, four orders of magnitude above the tolerance.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <random>

#include "lockstep/keras/optimizers.h"
#include "optimizer_update_in_ranges.h"

namespace lockstep::keras::optimizers {
namespace {

using Vec = std::vector<double>;

struct Reference {
  std::string kind{};  // sgd, adam, rmsprop, adagrad
  std::function<double(int64_t)> lr{};
  double beta_1 = 0.9, beta_2 = 0.999, epsilon = 1e-7;
  bool amsgrad = false;
  double momentum = 0.0;
  bool nesterov = false;
  double rho = 0.9;
  bool centered = false;
  double initial_accumulator = 0.1;
  std::optional<double> weight_decay{}, clipnorm{}, clipvalue{}, global_clipnorm{};
  std::string exclude{};  // a name substring excluded from weight decay
};

double norm2(const Vec& g) {
  double s = 0;
  for (double x : g) s += x * x;
  return s;
}

// One Keras step in float64 over all variables. slots[v][k] holds slot k of variable v.
void reference_step(const Reference& r, int64_t iterations, std::vector<Vec>& w, std::vector<Vec> g,
                    std::vector<std::vector<Vec>>& slots, const std::vector<std::string>& names) {
  const double lr = r.lr(iterations);
  const double t = static_cast<double>(iterations + 1);
  if (r.clipnorm) {
    for (Vec& gv : g) {
      double f = *r.clipnorm / std::max(std::sqrt(norm2(gv)), *r.clipnorm);
      for (double& x : gv) x *= f;
    }
  } else if (r.global_clipnorm) {
    double s = 0;
    for (Vec& gv : g) s += norm2(gv);
    double f = *r.global_clipnorm / std::max(std::sqrt(s), *r.global_clipnorm);
    for (Vec& gv : g)
      for (double& x : gv) x *= f;
  } else if (r.clipvalue) {
    for (Vec& gv : g)
      for (double& x : gv) x = std::clamp(x, -*r.clipvalue, *r.clipvalue);
  }
  for (size_t v = 0; v < w.size(); ++v) {
    bool decay =
        r.weight_decay && (r.exclude.empty() || names[v].find(r.exclude) == std::string::npos);
    auto& s = slots[v];
    for (size_t i = 0; i < w[v].size(); ++i) {
      double& x = w[v][i];
      const double gi = g[v][i];
      if (decay) x = x - x * *r.weight_decay * lr;
      if (r.kind == "sgd") {
        if (r.momentum == 0) {
          x -= lr * gi;
        } else {
          double& m = s[0][i];
          m = r.momentum * m - lr * gi;
          x += r.nesterov ? r.momentum * m - lr * gi : m;
        }
      } else if (r.kind == "adam") {
        double& m = s[0][i];
        double& vv = s[1][i];
        m = r.beta_1 * m + (1 - r.beta_1) * gi;
        vv = r.beta_2 * vv + (1 - r.beta_2) * gi * gi;
        double denom = vv;
        if (r.amsgrad) {
          s[2][i] = std::max(s[2][i], vv);
          denom = s[2][i];
        }
        double alpha = lr * std::sqrt(1 - std::pow(r.beta_2, t)) / (1 - std::pow(r.beta_1, t));
        x -= alpha * m / (std::sqrt(denom) + r.epsilon);
      } else if (r.kind == "rmsprop") {
        double& vel = s[0][i];
        vel = r.rho * vel + (1 - r.rho) * gi * gi;
        double d = vel + r.epsilon;
        if (r.centered) {
          double& a = s[r.momentum > 0 ? 2 : 1][i];
          a = r.rho * a + (1 - r.rho) * gi;
          d = vel - a * a + r.epsilon;
        }
        double inc = lr * gi / std::sqrt(d);
        if (r.momentum > 0) {
          double& mom = s[1][i];
          mom = r.momentum * mom + inc;
          x -= mom;
        } else {
          x -= inc;
        }
      } else if (r.kind == "adagrad") {
        double& acc = s[0][i];
        acc += gi * gi;
        x -= lr * gi / std::sqrt(acc + r.epsilon);
      }
    }
  }
}

struct Problem {
  std::vector<std::string> names{"dense/kernel", "dense/bias", "scale", "big/kernel"};
  std::vector<Shape> shapes{{3, 4}, {4}, {}, {1100}};  // 1100 crosses a 1024-element chunk
  std::vector<Variable> make_variables(uint32_t seed = 1) const {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<Variable> vars;
    for (size_t i = 0; i < names.size(); ++i) {
      Tensor t(shapes[i]);
      for (int64_t j = 0; j < t.num_elements(); ++j) t.data<float>()[j] = u(rng);
      vars.emplace_back(t, names[i]);
    }
    return vars;
  }
  // Gradients of step `step`, magnitude up to `scale` (large enough to trigger the clips).
  std::vector<Tensor> gradients(int step, float scale = 2.f) const {
    std::mt19937 rng(100 + static_cast<uint32_t>(step));
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<Tensor> g;
    for (const Shape& s : shapes) {
      Tensor t(s);
      for (int64_t j = 0; j < t.num_elements(); ++j) t.data<float>()[j] = u(rng);
      g.push_back(t);
    }
    return g;
  }
};

Vec to_vec(const Tensor& t) {
  return t.to_vector<double>();
}

void expect_matches_reference(Optimizer& opt, const Reference& ref, int num_slots) {
  Problem p;
  std::vector<Variable> vars = p.make_variables();
  std::vector<Vec> w;
  std::vector<std::vector<Vec>> slots;
  for (const Variable& v : vars) {
    w.push_back(to_vec(v.raw_value()));
    double init = ref.kind == "adagrad" ? ref.initial_accumulator : 0.0;
    slots.emplace_back(static_cast<size_t>(num_slots), Vec(w.back().size(), init));
  }
  for (int step = 0; step < 5; ++step) {
    std::vector<Tensor> g = p.gradients(step);
    std::vector<Vec> gd;
    for (const Tensor& t : g) gd.push_back(to_vec(t));
    reference_step(ref, step, w, gd, slots, p.names);
    opt.apply_gradients(g, vars);
  }
  EXPECT_EQ(opt.iterations(), 5);
  for (size_t v = 0; v < vars.size(); ++v) {
    Vec got = to_vec(vars[v].raw_value());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], w[v][i], 1e-6 * std::max(1.0, std::abs(w[v][i])))
          << vars[v].name() << "[" << i << "]";
    }
  }
}

std::function<double(int64_t)> constant(double lr) {
  return [lr](int64_t) { return lr; };
}

TEST(SGD, MatchesKerasRuleWithoutMomentum) {
  SGD opt({.learning_rate = 0.1});
  expect_matches_reference(opt, {.kind = "sgd", .lr = constant(0.1)}, 0);
}

TEST(SGD, MatchesKerasMomentumRule) {
  SGD opt({.learning_rate = 0.1, .momentum = 0.9});
  expect_matches_reference(opt, {.kind = "sgd", .lr = constant(0.1), .momentum = 0.9}, 1);
}

TEST(SGD, MatchesKerasNesterovRule) {
  SGD opt({.learning_rate = 0.1, .momentum = 0.9, .nesterov = true});
  expect_matches_reference(
      opt, {.kind = "sgd", .lr = constant(0.1), .momentum = 0.9, .nesterov = true}, 1);
}

TEST(SGD, ClipvalueClipsEachElementBeforeTheUpdate) {
  SGD opt({.learning_rate = 0.1, .momentum = 0.5, .base = {.clipvalue = 0.3}});
  expect_matches_reference(
      opt, {.kind = "sgd", .lr = constant(0.1), .momentum = 0.5, .clipvalue = 0.3}, 1);
}

TEST(SGD, WeightDecayShrinksWeightsBeforeTheUpdate) {
  SGD opt({.learning_rate = 0.1, .base = {.weight_decay = 0.05}});
  expect_matches_reference(opt, {.kind = "sgd", .lr = constant(0.1), .weight_decay = 0.05}, 0);
}

TEST(Adam, MatchesKerasEpsilonHatRule) {
  Adam opt({.learning_rate = 0.05});
  expect_matches_reference(opt, {.kind = "adam", .lr = constant(0.05)}, 2);
}

TEST(Adam, DefaultsAreKeras) {
  Adam opt;
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 1e-3);
  EXPECT_EQ(opt.options().beta_1, 0.9);
  EXPECT_EQ(opt.options().beta_2, 0.999);
  EXPECT_EQ(opt.options().epsilon, 1e-7);
  EXPECT_EQ(opt.name(), "adam");
  expect_matches_reference(opt, {.kind = "adam", .lr = constant(1e-3)}, 2);
}

TEST(Adam, AmsgradKeepsTheMaximumSecondMoment) {
  Adam opt({.learning_rate = 0.05, .amsgrad = true});
  expect_matches_reference(opt, {.kind = "adam", .lr = constant(0.05), .amsgrad = true}, 3);
}

TEST(Adam, ClipnormClipsEachGradientByItsOwnNorm) {
  Adam opt({.learning_rate = 0.05, .base = {.clipnorm = 0.5}});
  expect_matches_reference(opt, {.kind = "adam", .lr = constant(0.05), .clipnorm = 0.5}, 2);
}

TEST(Adam, FollowsALearningRateSchedule) {
  auto schedule = std::make_shared<schedules::ExponentialDecay>(schedules::ExponentialDecayOptions{
      .initial_learning_rate = 0.1, .decay_steps = 2, .decay_rate = 0.5});
  Adam opt({.learning_rate = schedule});
  expect_matches_reference(opt, {.kind = "adam", .lr = [&](int64_t s) { return (*schedule)(s); }},
                           2);
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 0.1 * std::pow(0.5, 5 / 2.0));
  EXPECT_THROW(opt.set_learning_rate(0.1), FailedPrecondition);
}

TEST(AdamW, DecaysWeightsWithTheStepLearningRateBeforeAdam) {
  AdamW opt({.learning_rate = 0.05, .weight_decay = 0.1});
  expect_matches_reference(opt, {.kind = "adam", .lr = constant(0.05), .weight_decay = 0.1}, 2);
}

TEST(AdamW, DefaultWeightDecayIsKeras) {
  AdamW opt;
  EXPECT_EQ(opt.get_config()["weight_decay"], 0.004);
  EXPECT_EQ(opt.name(), "adamw");
}

TEST(AdamW, ExcludedVariablesGetNoWeightDecay) {
  AdamW opt({.learning_rate = 0.05,
             .weight_decay = 0.2,
             .base = {.exclude_from_weight_decay = {"bias"}}});
  expect_matches_reference(
      opt, {.kind = "adam", .lr = constant(0.05), .weight_decay = 0.2, .exclude = "bias"}, 2);
}

TEST(RMSprop, MatchesKerasRule) {
  RMSprop opt({.learning_rate = 0.01});
  expect_matches_reference(opt, {.kind = "rmsprop", .lr = constant(0.01)}, 1);
}

TEST(RMSprop, CenteredWithMomentumMatchesKerasRule) {
  RMSprop opt({.learning_rate = 0.01, .momentum = 0.8, .centered = true});
  expect_matches_reference(
      opt, {.kind = "rmsprop", .lr = constant(0.01), .momentum = 0.8, .centered = true}, 3);
}

TEST(RMSprop, GlobalClipnormScalesAllGradientsByTheGlobalNorm) {
  RMSprop opt({.learning_rate = 0.01, .base = {.global_clipnorm = 1.0}});
  expect_matches_reference(opt, {.kind = "rmsprop", .lr = constant(0.01), .global_clipnorm = 1.0},
                           1);
}

TEST(Adagrad, MatchesKerasRuleFromTheInitialAccumulator) {
  Adagrad opt({.learning_rate = 0.1});
  expect_matches_reference(opt, {.kind = "adagrad", .lr = constant(0.1)}, 1);
}

TEST(Optimizer, OnlyOneClipOptionMayBeSet) {
  EXPECT_THROW(Adam({.base = {.clipnorm = 1.0, .global_clipnorm = 1.0}}), InvalidArgument);
  EXPECT_THROW(SGD({.base = {.clipnorm = 1.0, .clipvalue = 1.0}}), InvalidArgument);
  EXPECT_THROW(SGD({.base = {.clipnorm = -1.0}}), InvalidArgument);
}

TEST(AdamW, RefusesASecondWeightDecayInTheSharedOptions) {
  // AdamW's weight decay is its own option; base.weight_decay would be a second value.
  EXPECT_THROW(AdamW({.base = {.weight_decay = 0.1}}), InvalidArgument);
  EXPECT_NO_THROW(AdamW({.weight_decay = 0.1, .base = {.clipnorm = 1.0}}));
}

TEST(Optimizer, SlotsAreNamedAfterOptimizerSlotAndVariable) {
  Problem p;
  auto vars = p.make_variables();
  Adam opt;
  opt.build(vars);
  std::vector<std::string> names{};
  for (const Variable& v : opt.variables()) names.push_back(v.name());
  ASSERT_EQ(names.size(), 2u + 2u * vars.size());
  EXPECT_EQ(names[0], "adam/iterations");
  EXPECT_EQ(names[1], "adam/learning_rate");
  EXPECT_EQ(names[2], "adam/m/dense/kernel");
  EXPECT_EQ(names[3], "adam/v/dense/kernel");
}

TEST(Optimizer, SetLearningRateChangesTheNextStep) {
  SGD opt({.learning_rate = 0.1});
  Variable w(Tensor::full({2}, 1.0), "w");
  opt.set_learning_rate(0.5);
  opt.apply_gradients({Tensor::full({2}, 1.0)}, {w});
  EXPECT_FLOAT_EQ(w.raw_value().data<float>()[0], 0.5f);
  EXPECT_EQ(opt.learning_rate(), 0.5);
}

TEST(Optimizer, UndefinedGradientSkipsItsVariable) {
  SGD opt({.learning_rate = 0.1});
  Variable a(Tensor::full({2}, 1.0), "a"), b(Tensor::full({2}, 1.0), "b");
  opt.apply_gradients({Tensor(), Tensor::full({2}, 1.0)}, {a, b});
  EXPECT_EQ(a.raw_value().data<float>()[0], 1.0f);
  EXPECT_FLOAT_EQ(b.raw_value().data<float>()[0], 0.9f);
}

TEST(Optimizer, RejectsMismatchedGradientShapeWithBothShapes) {
  SGD opt;
  Variable a(Tensor::full({2, 3}, 1.0), "a");
  try {
    opt.apply_gradients({Tensor::full({3, 2}, 1.0)}, {a});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("float32[2, 3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("float32[3, 2]"), std::string::npos) << e.what();
  }
}

TEST(Optimizer, RejectsVariablesItWasNotBuiltWith) {
  SGD opt;
  Variable a(Tensor::full({2}, 1.0), "a"), b(Tensor::full({2}, 1.0), "b");
  opt.apply_gradients({Tensor::full({2}, 1.0)}, {a});
  EXPECT_THROW(opt.apply_gradients({Tensor::full({2}, 1.0)}, {b}), InvalidArgument);
}

// Splitting the flat parameter range across replica threads (begin_update, apply() on each range,
// end_update) gives bit-identical results.
void expect_range_split_is_exact(const std::function<std::unique_ptr<Optimizer>()>& make,
                                 std::vector<int64_t> cuts) {
  Problem p;
  auto full_vars = p.make_variables(7);
  auto split_vars = p.make_variables(7);
  auto full = make();
  auto split = make();
  int64_t total = 0;
  for (const Variable& v : split_vars) total += v.num_elements();
  cuts.insert(cuts.begin(), 0);
  cuts.push_back(total);
  for (int step = 0; step < 5; ++step) {
    auto g = p.gradients(step);
    full->apply_gradients(g, full_vars);
    update_in_ranges(*split, g, split_vars, cuts);
  }
  EXPECT_EQ(split->iterations(), full->iterations());
  for (size_t v = 0; v < full_vars.size(); ++v) {
    EXPECT_EQ(full_vars[v].raw_value().to_vector<float>(),
              split_vars[v].raw_value().to_vector<float>())
        << full_vars[v].name();
  }
  auto a = full->variables(), b = split->variables();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 2; i < a.size(); ++i) {
    EXPECT_EQ(a[i].raw_value().to_vector<float>(), b[i].raw_value().to_vector<float>())
        << a[i].name();
  }
}

TEST(Optimizer, RangeSplitAcrossThreeThreadsEqualsApplyGradients) {
  expect_range_split_is_exact(
      [] {
        return std::make_unique<AdamW>(
            AdamWOptions{.learning_rate = 0.05, .base = {.global_clipnorm = 1.0}});
      },
      {5, 600});
  expect_range_split_is_exact(
      [] {
        return std::make_unique<RMSprop>(
            RMSpropOptions{.momentum = 0.5, .centered = true, .base = {.clipnorm = 0.7}});
      },
      {17});
  expect_range_split_is_exact(
      [] {
        return std::make_unique<SGD>(
            SGDOptions{.momentum = 0.9, .nesterov = true, .base = {.clipvalue = 0.5}});
      },
      {1, 16, 1000});
}

TEST(Optimizer, GetReturnsKerasDefaultsByName) {
  EXPECT_EQ(get("Adam")->name(), "adam");
  EXPECT_EQ(get("sgd")->learning_rate(), 0.01);
  EXPECT_EQ(get("rmsprop")->get_config()["rho"], 0.9);
  EXPECT_EQ(get("adagrad")->get_config()["initial_accumulator_value"], 0.1);
  EXPECT_THROW(get("adamax"), InvalidArgument);
}

TEST(Optimizer, CloneIsFreshWithTheSameConfig) {
  Adam opt({.learning_rate = 0.02, .beta_1 = 0.8});
  Variable a(Tensor::full({2}, 1.0), "a");
  opt.apply_gradients({Tensor::full({2}, 1.0)}, {a});
  auto c = opt.clone();
  EXPECT_EQ(c->iterations(), 0);
  EXPECT_FALSE(c->built());
  EXPECT_EQ(c->get_config(), opt.get_config());
}

}  // namespace
}  // namespace lockstep::keras::optimizers
