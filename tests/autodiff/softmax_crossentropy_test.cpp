// softmax_crossentropy: cross-entropy from logits whose softmax is given. Forward against a
// float64 log-sum-exp written here (including logit gaps where float32 probabilities underflow),
// backward against central differences of the composite loss(z) = softmax_crossentropy(y, z,
// softmax(z)), and bad operands named.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/losses.h"
#include "lockstep/core/error.h"
#include "testing/gradient_check.h"

namespace lockstep {
namespace {

std::vector<double> reference(const std::vector<double>& z, const std::vector<double>& y,
                              int64_t n) {
  std::vector<double> out;
  for (size_t r = 0; r * n < z.size(); ++r) {
    double m = -INFINITY, s = 0, loss = 0;
    for (int64_t k = 0; k < n; ++k) m = std::max(m, z[r * n + k]);
    for (int64_t k = 0; k < n; ++k) s += std::exp(z[r * n + k] - m);
    for (int64_t k = 0; k < n; ++k) loss += y[r * n + k] * (m + std::log(s) - z[r * n + k]);
    out.push_back(loss);
  }
  return out;
}

TEST(SoftmaxCrossentropy, MatchesLogSumExpInFloat64) {
  const std::vector<double> z = {-200, 0, 0.5, 0.3, -0.2, 0.1, 30, -30, 0, 1e-3, 2e-3, -1e-3};
  const std::vector<double> y = {1, 0, 0, 0, 1, 0, 0, 0.5, 0.5, 0.2, 0.3, 0.5};
  std::vector<float> zf(z.begin(), z.end()), yf(y.begin(), y.end());
  Tensor logits = Tensor::from_vector(zf, {4, 3}), labels = Tensor::from_vector(yf, {4, 3});
  Tensor loss = softmax_crossentropy(labels, logits, softmax(logits, -1));
  const std::vector<double> want = reference(z, y, 3);
  ASSERT_EQ(loss.shape(), Shape({4}));
  for (int r = 0; r < 4; ++r)
    EXPECT_NEAR(loss.data<float>()[r], want[r], 2e-6 * std::max(1.0, want[r])) << "row " << r;
}

TEST(SoftmaxCrossentropy, GradientMatchesFiniteDifferences) {
  Tensor y = Tensor::from_vector<double>({0, 1, 0, 0.25, 0.25, 0.5, 1, 0, 0}, {3, 3});
  Tensor z = Tensor::from_vector<double>({0.3, -1.2, 2.0, 0.1, 0.4, -0.7, 5.0, -3.0, 0.2}, {3, 3});
  testing::expect_gradients_match(
      [y](const std::vector<Tensor>& in) {
        return softmax_crossentropy(y, in[0], softmax(in[0], -1));
      },
      {z});
}

TEST(SoftmaxCrossentropy, NonFiniteProbabilitiesGiveNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor z = Tensor::from_vector<float>({nan, 0, 1, 0}, {2, 2});
  Tensor loss =
      softmax_crossentropy(Tensor::from_vector<float>({1, 0, 1, 0}, {2, 2}), z, softmax(z, -1));
  EXPECT_TRUE(std::isnan(loss.data<float>()[0]));
  EXPECT_NEAR(loss.data<float>()[1], std::log(1 + std::exp(-1.0)), 1e-6);
}

TEST(SoftmaxCrossentropy, MismatchedOperandsAreNamed) {
  Tensor z = Tensor::zeros({2, 3}), p = Tensor::zeros({2, 4}), y = Tensor::zeros({2, 3});
  try {
    softmax_crossentropy(y, z, p);
    FAIL() << "accepted probabilities of another shape";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 4]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lockstep
