// Keras' _keras_logits: categorical cross-entropy given the output of a softmax activation is
// computed from that softmax's logits (no probability clipping; gradient softmax(z) - y), and
// from the probabilities for anything else.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/losses.h"
#include "lockstep/keras/activations.h"
#include "lockstep/keras/losses.h"
#include "testing/gradient_check.h"

namespace lockstep::keras {
namespace {

Tensor f32(std::vector<float> v, Shape s) {
  return Tensor::from_vector(v, s);
}

// Row 0's true class has a logit 200 below the other: its probability underflows to 0 in float32.
Tensor logits() {
  return f32({-200.0f, 0.0f, 0.5f, 0.3f, -0.2f, 0.1f}, {2, 3});
}
Tensor labels() {
  return f32({1, 0, 0, 0, 1, 0}, {2, 3});
}

// float64 reference written here: -sum_k y_k (z_k - logsumexp(z)), and with probabilities clipped
// to [1e-7, 1 - 1e-7] (Keras' epsilon) for the probability path.
std::vector<double> reference(const Tensor& z, const Tensor& y, bool clipped) {
  std::vector<double> out;
  for (int64_t r = 0; r < z.dim(0); ++r) {
    double m = -INFINITY, s = 0, loss = 0;
    for (int64_t k = 0; k < z.dim(1); ++k) m = std::max(m, double{z.data<float>()[r * 3 + k]});
    for (int64_t k = 0; k < z.dim(1); ++k) s += std::exp(z.data<float>()[r * 3 + k] - m);
    for (int64_t k = 0; k < z.dim(1); ++k) {
      const double zk = z.data<float>()[r * 3 + k], yk = y.data<float>()[r * 3 + k];
      // The probability as float32 computes it: exp(-200) is 0 there.
      const double p = static_cast<float>(std::exp(zk - m) / s);
      loss -= clipped ? yk * std::log(std::min(std::max(p, 1e-7), 1 - 1e-7))
                      : yk * (zk - m - std::log(s));
    }
    out.push_back(loss);
  }
  return out;
}

TEST(SoftmaxLogits, TheLossOfASoftmaxOutputComesFromItsLogits) {
  const Tensor z = logits(), y = labels();
  Tensor p = activations::get("softmax")(z);
  ASSERT_EQ(p.data<float>()[0], 0.0f);
  Tensor loss = losses::CategoricalCrossentropy().call(y, p);
  const std::vector<double> want = reference(z, y, /*clipped=*/false);
  EXPECT_GT(want[0], 200.0);  // the logit gap, not -log(1e-7) = 16.1
  for (int r = 0; r < 2; ++r) EXPECT_NEAR(loss.data<float>()[r], want[r], 1e-5 * want[r]);
}

TEST(SoftmaxLogits, ACopyOfTheProbabilitiesTakesTheClippedProbabilityPath) {
  const Tensor z = logits(), y = labels();
  Tensor p = activations::get("softmax")(z).clone();
  Tensor loss = losses::CategoricalCrossentropy().call(y, p);
  const std::vector<double> want = reference(z, y, /*clipped=*/true);
  EXPECT_NEAR(loss.data<float>()[0], -std::log(1e-7), 1e-5);
  for (int r = 0; r < 2; ++r) EXPECT_NEAR(loss.data<float>()[r], want[r], 1e-5 * want[r]);
}

TEST(SoftmaxLogits, TheLogitsAreUsedOnceAndOnlyForTheLatestSoftmax) {
  const Tensor z = logits(), y = labels();
  auto softmax = activations::get("softmax");
  Tensor p = softmax(z);
  Tensor first = losses::CategoricalCrossentropy().call(y, p);
  Tensor second = losses::CategoricalCrossentropy().call(y, p);
  EXPECT_NEAR(first.data<float>()[0], reference(z, y, false)[0], 1e-4);
  EXPECT_NEAR(second.data<float>()[0], -std::log(1e-7), 1e-5);  // taken: now the probabilities
  Tensor older = softmax(z);
  const Tensor half = mul(z, Tensor::scalar(0.5));
  Tensor newer = softmax(half);
  EXPECT_NEAR(losses::CategoricalCrossentropy().call(y, older).data<float>()[0], -std::log(1e-7),
              1e-5);
  EXPECT_NEAR(losses::CategoricalCrossentropy().call(y, newer).data<float>()[0],
              reference(half, y, false)[0], 1e-4);
}

TEST(SoftmaxLogits, SparseCategoricalCrossentropyToo) {
  const Tensor z = logits();
  Tensor p = activations::get("softmax")(z);
  Tensor loss =
      losses::SparseCategoricalCrossentropy().call(Tensor::from_vector<int64_t>({0, 1}, {2}), p);
  const std::vector<double> want = reference(z, labels(), /*clipped=*/false);
  for (int r = 0; r < 2; ++r) EXPECT_NEAR(loss.data<float>()[r], want[r], 1e-5 * want[r]);
}

// Row 0's true class has probability 0 in float32: the probability path would clip it and pass no
// gradient; from the logits the gradient is p − y, here −1 at the true class. Against p − y
// computed in float64 here (the mean over the 2 rows halves it).
TEST(SoftmaxLogits, AnUnderflowedProbabilityKeepsItsGradient) {
  const Tensor z = logits(), y = labels();
  GradientTape tape;
  tape.watch(z);
  Tensor loss = losses::CategoricalCrossentropy()(y, activations::get("softmax")(z));
  const std::vector<Tensor> g = tape.gradient(loss, {z});
  ASSERT_EQ(g[0].shape(), z.shape());
  for (int64_t r = 0; r < 2; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t k = 0; k < 3; ++k) m = std::max(m, double{z.data<float>()[r * 3 + k]});
    for (int64_t k = 0; k < 3; ++k) s += std::exp(z.data<float>()[r * 3 + k] - m);
    for (int64_t k = 0; k < 3; ++k) {
      const double p = std::exp(z.data<float>()[r * 3 + k] - m) / s;
      const double want = (p - y.data<float>()[r * 3 + k]) / 2;
      EXPECT_NEAR(g[0].data<float>()[r * 3 + k], want, 1e-6) << "row " << r << " class " << k;
    }
  }
  EXPECT_NEAR(g[0].data<float>()[0], -0.5, 1e-6);  // not 0, as clipping would give
}

// The gradient reaching the logits through a softmax output and the loss, against central
// differences of the same function (float64 inputs: the helper's rule).
TEST(SoftmaxLogits, GradientThroughTheLogitsPathMatchesFiniteDifferences) {
  Tensor y = f32({0, 1, 0, 0.25f, 0.25f, 0.5f}, {2, 3}).to(DType::float64);
  Tensor z = f32({0.3f, -1.2f, 2.0f, 0.1f, 0.4f, -0.7f}, {2, 3}).to(DType::float64);
  lockstep::testing::expect_gradients_match(
      [y](const std::vector<Tensor>& in) {
        return losses::CategoricalCrossentropy().call(y, activations::get("softmax")(in[0]));
      },
      {z});
}

}  // namespace
}  // namespace lockstep::keras
