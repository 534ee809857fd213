// Every optimizer through the same checks (the optimizer half of the conformance harness):
// a few steps on the convex quadratic L(w) = Σ_i (w_i - t_i)² over two variables of odd sizes
// lower the loss every step, count iterations, and create the optimizer's slots with the shape of
// each variable. Exact update rules are checked against float64 loops in
// optimizers_optimizer_test.cpp; this file checks the shared contract.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <memory>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/keras/optimizers.h"

namespace lockstep::keras::optimizers {
namespace {

struct OptimizerCase {
  std::string name;
  std::function<std::unique_ptr<Optimizer>()> make;
  size_t slots_per_variable;  // from Keras: m and v for Adam, momentum for SGD(momentum > 0), ...
};

std::vector<OptimizerCase> all_optimizer_cases() {
  return {
      {"SGD", [] { return std::make_unique<SGD>(SGDOptions{.learning_rate = 0.1}); }, 0},
      {"SGDMomentum",
       [] { return std::make_unique<SGD>(SGDOptions{.learning_rate = 0.05, .momentum = 0.5}); }, 1},
      {"SGDNesterov",
       [] {
         return std::make_unique<SGD>(
             SGDOptions{.learning_rate = 0.05, .momentum = 0.5, .nesterov = true});
       },
       1},
      {"Adam", [] { return std::make_unique<Adam>(AdamOptions{.learning_rate = 0.05}); }, 2},
      {"AdamW", [] { return std::make_unique<AdamW>(AdamWOptions{.learning_rate = 0.05}); }, 2},
      {"RMSprop", [] { return std::make_unique<RMSprop>(RMSpropOptions{.learning_rate = 0.01}); },
       1},
      {"Adagrad", [] { return std::make_unique<Adagrad>(AdagradOptions{.learning_rate = 0.1}); },
       1},
  };
}

class OptimizerConformance : public ::testing::TestWithParam<OptimizerCase> {};

TEST_P(OptimizerConformance, LowersAConvexLossEveryStepAndCountsIterations) {
  const OptimizerCase& c = GetParam();
  std::unique_ptr<Optimizer> opt = c.make();
  // Momentum 0.5 (not 0.9): with lr 0.05 on this curvature (2), Nesterov's 0.9 overshoots by
  // step 5 — a correct optimizer whose loss is not monotone. Targets far from the start (|w - t| ~
  // 2) so that weight decay (AdamW) cannot dominate.
  Variable a(Tensor::from_vector<float>({1, -2, 3, 0.5f, -1.5f}, {5}), "quadratic/a");
  Variable b(Tensor::from_vector<float>({0.25f, 2, -3, 1, 0, -0.5f, 2.5f}, {7}), "quadratic/b");
  const Tensor ta = Tensor::full({5}, -1.0);
  const Tensor tb = Tensor::full({7}, 1.5);
  auto loss_of = [&] {
    return add(reduce_sum(square(sub(a.value(), ta))), reduce_sum(square(sub(b.value(), tb))));
  };
  double previous = loss_of().item();
  const double initial = previous;
  for (int step = 1; step <= 5; ++step) {
    GradientTape tape;
    Tensor loss = loss_of();
    opt->apply_gradients(tape.gradient(loss, std::vector<Variable>{a, b}), {a, b});
    const double now = loss_of().item();
    EXPECT_LT(now, previous) << "step " << step;
    previous = now;
    EXPECT_EQ(opt->iterations(), step);
  }
  EXPECT_LT(previous, initial);
}

TEST_P(OptimizerConformance, CreatesSlotsShapedLikeEachVariable) {
  const OptimizerCase& c = GetParam();
  std::unique_ptr<Optimizer> opt = c.make();
  Variable a(Tensor::zeros({5}), "quadratic/a");
  Variable b(Tensor::zeros({3, 7}), "quadratic/b");
  opt->build({a, b});
  for (const Variable& v : {a, b}) {
    size_t slots = 0;
    for (const Variable& s : opt->variables()) {
      const std::string& n = s.name();
      if (n.size() > v.name().size() &&
          n.compare(n.size() - v.name().size(), v.name().size(), v.name()) == 0) {
        ++slots;
        EXPECT_EQ(s.shape(), v.shape()) << n;
        EXPECT_FALSE(s.trainable()) << n;
      }
    }
    EXPECT_EQ(slots, c.slots_per_variable) << v.name();
  }
  EXPECT_EQ(opt->iterations(), 0);
}

TEST_P(OptimizerConformance, CloneHasTheSameConfig) {
  const OptimizerCase& c = GetParam();
  std::unique_ptr<Optimizer> opt = c.make();
  EXPECT_EQ(opt->clone()->get_config(), opt->get_config());
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, OptimizerConformance,
                         ::testing::ValuesIn(all_optimizer_cases()),
                         [](const ::testing::TestParamInfo<OptimizerCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace lockstep::keras::optimizers
