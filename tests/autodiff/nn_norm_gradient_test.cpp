// batch_norm (training and inference) and layer_norm gradients (float64) against central
// differences through the shared checker.
#include <gtest/gtest.h>

#include <vector>

#include "lockstep/autodiff/nn_functions.h"
#include "testing/gradient_check.h"

namespace lockstep {
namespace {

using testing::gradients_match;
using testing::random_f64;
using V = std::vector<Tensor>;

TEST(BatchNormGradient, TrainingModeMatchesCentralDifferences) {
  Generator gen(3);
  Tensor x = random_f64(gen, {3, 5, 4, 7}, -2, 3);
  Tensor gamma = random_f64(gen, {7}, 0.5, 1.5);
  Tensor beta = random_f64(gen, {7});
  EXPECT_TRUE(gradients_match([](const V& in) { return batch_norm(in[0], in[1], in[2]).output; },
                              {x, gamma, beta}));
}

TEST(BatchNormGradient, TrainingModeWithoutScaleOrCenter) {
  Generator gen(4);
  Tensor x = random_f64(gen, {6, 5});
  EXPECT_TRUE(gradients_match(
      [](const V& in) { return batch_norm(in[0], Tensor(), Tensor(), 1e-2).output; }, {x}));
  Tensor beta = random_f64(gen, {5});
  EXPECT_TRUE(gradients_match([](const V& in) { return batch_norm(in[0], Tensor(), in[1]).output; },
                              {x, beta}));
}

TEST(BatchNormGradient, InferenceModeMatchesCentralDifferences) {
  Generator gen(5);
  Tensor x = random_f64(gen, {3, 7, 5});
  Tensor gamma = random_f64(gen, {5}, 0.5, 1.5);
  Tensor beta = random_f64(gen, {5});
  Tensor mm = random_f64(gen, {5});
  Tensor mv = random_f64(gen, {5}, 0.5, 2);
  EXPECT_TRUE(gradients_match(
      [=](const V& in) { return batch_norm_inference(in[0], in[1], in[2], mm, mv); },
      {x, gamma, beta}));
}

TEST(LayerNormGradient, MatchesCentralDifferences) {
  Generator gen(6);
  Tensor x = random_f64(gen, {3, 4, 7}, -2, 3);
  Tensor gamma = random_f64(gen, {7}, 0.5, 1.5);
  Tensor beta = random_f64(gen, {7});
  EXPECT_TRUE(gradients_match([](const V& in) { return layer_norm(in[0], in[1], in[2]); },
                              {x, gamma, beta}));
}

TEST(LayerNormGradient, WithoutScaleOrCenter) {
  Generator gen(7);
  Tensor x = random_f64(gen, {5, 9});
  EXPECT_TRUE(
      gradients_match([](const V& in) { return layer_norm(in[0], Tensor(), Tensor()); }, {x}));
}

}  // namespace
}  // namespace lockstep
