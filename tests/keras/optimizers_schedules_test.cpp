#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <numbers>

#include "lockstep/core/error.h"
#include "lockstep/keras/optimizers/schedules/learning_rate_schedule.h"

namespace lockstep::keras::optimizers::schedules {
namespace {

TEST(ExponentialDecay, DecaysContinuouslyByRatePerDecaySteps) {
  ExponentialDecay s({.initial_learning_rate = 0.1, .decay_steps = 10, .decay_rate = 0.5});
  for (int64_t step : {0, 1, 5, 10, 15, 100}) {
    EXPECT_DOUBLE_EQ(s(step), 0.1 * std::pow(0.5, static_cast<double>(step) / 10.0)) << step;
  }
}

TEST(ExponentialDecay, StaircaseFloorsTheExponent) {
  ExponentialDecay s(
      {.initial_learning_rate = 0.1, .decay_steps = 10, .decay_rate = 0.5, .staircase = true});
  EXPECT_DOUBLE_EQ(s(9), 0.1);
  EXPECT_DOUBLE_EQ(s(10), 0.05);
  EXPECT_DOUBLE_EQ(s(25), 0.025);
}

TEST(ExponentialDecay, RejectsNonPositiveDecaySteps) {
  EXPECT_THROW(
      ExponentialDecay({.initial_learning_rate = 0.1, .decay_steps = 0, .decay_rate = 0.5}),
      InvalidArgument);
}

TEST(CosineDecay, FollowsHalfCosineToAlphaAndStays) {
  CosineDecay s({.initial_learning_rate = 0.2, .decay_steps = 100, .alpha = 0.1});
  for (int64_t step : {0, 1, 50, 99, 100, 1000}) {
    double p = static_cast<double>(std::min<int64_t>(step, 100)) / 100.0;
    double expected = 0.2 * (0.9 * 0.5 * (1 + std::cos(std::numbers::pi * p)) + 0.1);
    EXPECT_NEAR(s(step), expected, 1e-15) << step;
  }
  EXPECT_NEAR(s(100), 0.02, 1e-15);
}

TEST(CosineDecay, WarmsUpLinearlyToTargetThenDecaysFromIt) {
  CosineDecay s({.initial_learning_rate = 0.0,
                 .decay_steps = 100,
                 .alpha = 0.0,
                 .warmup_target = 1.0,
                 .warmup_steps = 10});
  EXPECT_DOUBLE_EQ(s(0), 0.0);
  EXPECT_DOUBLE_EQ(s(5), 0.5);
  EXPECT_DOUBLE_EQ(s(10), 1.0);
  EXPECT_NEAR(s(60), 0.5 * (1 + std::cos(std::numbers::pi * 0.5)), 1e-15);
  EXPECT_NEAR(s(110), 0.0, 1e-15);
  EXPECT_NEAR(s(500), 0.0, 1e-15);
}

TEST(PiecewiseConstantDecay, IntervalsAreClosedOnTheRight) {
  PiecewiseConstantDecay s({100, 200}, {1.0, 0.5, 0.1});
  EXPECT_EQ(s(0), 1.0);
  EXPECT_EQ(s(100), 1.0);
  EXPECT_EQ(s(101), 0.5);
  EXPECT_EQ(s(200), 0.5);
  EXPECT_EQ(s(201), 0.1);
}

TEST(PiecewiseConstantDecay, RejectsMismatchedLengths) {
  EXPECT_THROW(PiecewiseConstantDecay({100}, {1.0}), InvalidArgument);
  EXPECT_THROW(PiecewiseConstantDecay({200, 100}, {1.0, 2.0, 3.0}), InvalidArgument);
}

TEST(LearningRateSchedule, SerializeDeserializeRoundTrips) {
  CosineDecay s(
      {.initial_learning_rate = 0.1, .decay_steps = 7, .warmup_target = 0.3, .warmup_steps = 3});
  auto back = deserialize(serialize(s));
  for (int64_t step = 0; step < 12; ++step) EXPECT_DOUBLE_EQ((*back)(step), s(step));
  PiecewiseConstantDecay p({1, 2}, {3.0, 2.0, 1.0});
  EXPECT_EQ(deserialize(serialize(p))->get_config(), p.get_config());
}

}  // namespace
}  // namespace lockstep::keras::optimizers::schedules
