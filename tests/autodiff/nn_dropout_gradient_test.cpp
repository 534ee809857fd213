// dropout gradients (float64) against central differences through the shared
// checker.
#include <gtest/gtest.h>

#include <vector>

#include "lockstep/autodiff/nn_functions.h"
#include "testing/gradient_check.h"

namespace lockstep {
namespace {

using testing::gradients_match;
using testing::random_f64;
using V = std::vector<Tensor>;

TEST(DropoutGradient, MatchesCentralDifferencesWithAFixedSeed) {
  Generator gen(9);
  Tensor x = random_f64(gen, {4, 7, 3});
  // A fresh generator per call: every evaluation of f draws the same mask.
  EXPECT_TRUE(gradients_match(
      [](const V& in) {
        Generator mask_gen(123, 1);
        return dropout(in[0], 0.3, mask_gen);
      },
      {x}));
}

TEST(DropoutGradient, RateZeroPassesTheGradientThrough) {
  Generator gen(10);
  Tensor x = random_f64(gen, {3, 5});
  EXPECT_TRUE(gradients_match(
      [](const V& in) {
        Generator mask_gen(1);
        return dropout(in[0], 0.0, mask_gen);
      },
      {x}));
}

}  // namespace
}  // namespace lockstep
