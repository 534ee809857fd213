// ops::softmax_crossentropy_forward's edge cases against float64 log-sum-exp written here: a class
// whose logit is -inf and whose label is 0 costs nothing (0 · inf is skipped, not NaN); an infinite
// or NaN probability anywhere in a row makes that row NaN and leaves the others alone; the largest
// probability may sit in any column, and ties take the first.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "lockstep/ops/losses.h"
#include "lockstep/ops/softmax.h"

namespace lockstep {
namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

double reference(const std::vector<float>& z, const std::vector<float>& y, size_t row, size_t n) {
  double m = -INFINITY, s = 0, loss = 0;
  for (size_t k = 0; k < n; ++k) m = std::max(m, double{z[row * n + k]});
  for (size_t k = 0; k < n; ++k) s += std::exp(double{z[row * n + k]} - m);
  for (size_t k = 0; k < n; ++k) {
    if (y[row * n + k] != 0) loss += y[row * n + k] * (m + std::log(s) - z[row * n + k]);
  }
  return loss;
}

TEST(SoftmaxCrossentropyOp, MatchesLogSumExpWhereverTheLargestProbabilityIs) {
  const size_t n = 5;
  // Row 0: largest last; row 1: largest first; row 2: a tie (first wins, same value); row 3: a
  // -inf logit with label 0.
  const std::vector<float> z = {0.1f, -0.3f, 0.2f, 0.4f, 3.0f,  2.5f, 0.0f,  -1.0f, 0.5f, 0.25f,
                                1.0f, 1.0f,  0.0f, 0.3f, -2.0f, 0.7f, -kInf, 0.1f,  0.2f, 0.3f};
  const std::vector<float> y = {0, 1, 0, 0, 0, 0, 0, 0.5f, 0.5f, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0};
  Tensor logits = Tensor::from_vector(z, {4, 5}), labels = Tensor::from_vector(y, {4, 5});
  Tensor p = ops::softmax_forward(logits, -1);
  const std::vector<float> loss =
      ops::softmax_crossentropy_forward(labels, logits, p).to_vector<float>();
  for (size_t r = 0; r < 4; ++r) {
    const double want = reference(z, y, r, n);
    EXPECT_NEAR(loss[r], want, 2e-6 * (1 + want)) << "row " << r;
  }
}

TEST(SoftmaxCrossentropyOp, ANonFiniteProbabilityMakesOnlyItsRowNaN) {
  const std::vector<float> z = {0.1f, 0.2f, 0.3f, 0.1f, 0.2f, 0.3f, 0.1f, 0.2f, 0.3f};
  const std::vector<float> y = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  Tensor logits = Tensor::from_vector(z, {3, 3}), labels = Tensor::from_vector(y, {3, 3});
  std::vector<float> p = ops::softmax_forward(logits, -1).to_vector<float>();
  p[1] = kInf;  // row 0
  p[5] = kNaN;  // row 1
  const std::vector<float> loss =
      ops::softmax_crossentropy_forward(labels, logits, Tensor::from_vector(p, {3, 3}))
          .to_vector<float>();
  EXPECT_TRUE(std::isnan(loss[0]));
  EXPECT_TRUE(std::isnan(loss[1]));
  EXPECT_NEAR(loss[2], reference(z, y, 2, 3), 2e-6);
}

}  // namespace
}  // namespace lockstep
