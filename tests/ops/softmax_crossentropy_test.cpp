// ops::softmax_crossentropy_forward's edge cases against float64 log-sum-exp written here: a class
// whose logit is -inf and whose label is 0 costs nothing (0 · inf is skipped, not NaN); an infinite
// or NaN probability anywhere in a row makes that row NaN and leaves the others alone; the largest
// probability may sit in any column, and ties take the first. A classifier's short class axis runs
// in blocks of rows (a vector's lanes), so the shapes below cover partial blocks, class counts up
// to the blocked path's 32 and one past it, and non-finite rows inside a block.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "lockstep/core/random.h"
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

// How far the float32 loss of a row may be from the float64 one, for logits in [-4, 4] and at most
// two labelled classes of weight at most 1: lse = z_j - log p_j, p_j the largest probability (at
// least 1/n). p_j carries the softmax's error, under (n + 2) · 2^-24 relative (exponentials within
// an ulp, a sum of n terms, a division), which its log turns into as much absolute error; the log
// adds an ulp of |log p_j| <= log 33 < 4, the subtraction half an ulp of |lse| < 8, and the
// labelled terms t_k (lse - z_k) and their sum at most three roundings of the loss.
double loss_bound(int64_t n, double want) {
  return (static_cast<double>(n) + 20.0 + 3.0 * want) * std::ldexp(1.0, -24);
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

TEST(SoftmaxCrossentropyOp, ManyRowsMatchLogSumExpForEveryShortClassCount) {
  Generator gen(11);
  for (const int64_t n : {1, 2, 3, 10, 16, 17, 31, 32, 33}) {
    for (const int64_t rows : {1, 15, 16, 37, 128}) {
      const std::vector<float> z = gen.uniform({rows, n}, -4, 4).to_vector<float>();
      // One-hot rows, a soft row every fifth one, and an unlabelled row every seventh.
      std::vector<float> y(static_cast<size_t>(rows * n), 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        if (r % 7 == 6) continue;
        if (r % 5 == 4 && n > 1) {
          y[static_cast<size_t>(r * n)] = 0.25f;
          y[static_cast<size_t>(r * n + n - 1)] = 0.75f;
        } else {
          y[static_cast<size_t>(r * n + (r * 3) % n)] = 1.0f;
        }
      }
      Tensor logits = Tensor::from_vector(z, {rows, n}), labels = Tensor::from_vector(y, {rows, n});
      const std::vector<float> loss =
          ops::softmax_crossentropy_forward(labels, logits, ops::softmax_forward(logits, -1))
              .to_vector<float>();
      for (int64_t r = 0; r < rows; ++r) {
        const double want = reference(z, y, static_cast<size_t>(r), static_cast<size_t>(n));
        EXPECT_NEAR(loss[static_cast<size_t>(r)], want, loss_bound(n, want))
            << "n " << n << ", rows " << rows << ", row " << r;
      }
    }
  }
}

TEST(SoftmaxCrossentropyOp, ANonFiniteRowInsideABlockLeavesItsNeighboursAlone) {
  const int64_t rows = 40, n = 10;
  Generator gen(12);
  const std::vector<float> z = gen.uniform({rows, n}, -2, 2).to_vector<float>();
  std::vector<float> y(static_cast<size_t>(rows * n), 0.0f);
  for (int64_t r = 0; r < rows; ++r) y[static_cast<size_t>(r * n + r % n)] = 1.0f;
  Tensor logits = Tensor::from_vector(z, {rows, n});
  std::vector<float> p = ops::softmax_forward(logits, -1).to_vector<float>();
  p[static_cast<size_t>(5 * n + 3)] = kNaN;
  p[static_cast<size_t>(21 * n + 9)] = kInf;
  p[static_cast<size_t>(39 * n)] = -kInf;
  const std::vector<float> loss =
      ops::softmax_crossentropy_forward(Tensor::from_vector(y, {rows, n}), logits,
                                        Tensor::from_vector(p, {rows, n}))
          .to_vector<float>();
  for (int64_t r = 0; r < rows; ++r) {
    if (r == 5 || r == 21 || r == 39) {
      EXPECT_TRUE(std::isnan(loss[static_cast<size_t>(r)])) << "row " << r;
    } else {
      const double want = reference(z, y, static_cast<size_t>(r), static_cast<size_t>(n));
      EXPECT_NEAR(loss[static_cast<size_t>(r)], want, loss_bound(n, want)) << "row " << r;
    }
  }
}

}  // namespace
}  // namespace lockstep
