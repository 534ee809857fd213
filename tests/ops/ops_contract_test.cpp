// Bad input errors (naming both shapes), Keras' loss numerics on hand-checked values, loop ops
// against float64 references, and the steady state of the training hot path.
#include <cmath>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <algorithm>
#include <limits>
#include <vector>

#include "lockstep/core/random.h"
#include "lockstep/ops.h"

namespace lockstep {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

template <typename F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "<no InvalidArgument thrown>";
}

TEST(OpErrors, MatmulNamesBothShapes) {
  Tensor a({3, 4}), b({5, 6});
  EXPECT_THAT(invalid_argument_message([&] { ops::matmul_forward(a, b); }),
              AllOf(HasSubstr("matmul"), HasSubstr("[3, 4]"), HasSubstr("[5, 6]")));
}

TEST(OpErrors, MatmulDtypeMismatchNamesBothOperands) {
  Tensor a({3, 4}), b({4, 6}, DType::float64);
  EXPECT_THAT(invalid_argument_message([&] { ops::matmul_forward(a, b); }),
              AllOf(HasSubstr("float32[3, 4]"), HasSubstr("float64[4, 6]")));
}

TEST(OpErrors, LinearNamesXAndKernel) {
  Tensor x({8, 5}), k({6, 3}), b({3});
  EXPECT_THAT(invalid_argument_message([&] { ops::linear_forward(x, k, b); }),
              AllOf(HasSubstr("linear"), HasSubstr("[8, 5]"), HasSubstr("[6, 3]")));
  Tensor k2({5, 3}), bad_bias({4});
  EXPECT_THAT(invalid_argument_message([&] { ops::linear_forward(x, k2, bad_bias); }),
              AllOf(HasSubstr("bias"), HasSubstr("[3]"), HasSubstr("[4]")));
}

TEST(OpErrors, BroadcastingNamesBothShapes) {
  Tensor a({3, 4}), b({5, 6});
  for (auto op : {&ops::add_forward, &ops::sub_forward, &ops::mul_forward, &ops::div_forward}) {
    EXPECT_THAT(invalid_argument_message([&] { op(a, b); }),
                AllOf(HasSubstr("[3, 4]"), HasSubstr("[5, 6]"), HasSubstr("broadcast")));
  }
}

TEST(OpErrors, LossesNameBothShapes) {
  Tensor t({4, 3}), p({4, 5});
  EXPECT_THAT(
      invalid_argument_message([&] { ops::categorical_crossentropy_forward(t, p); }),
      AllOf(HasSubstr("categorical_crossentropy"), HasSubstr("[4, 3]"), HasSubstr("[4, 5]")));
  EXPECT_THAT(invalid_argument_message([&] { ops::mean_squared_error_forward(t, p); }),
              AllOf(HasSubstr("[4, 3]"), HasSubstr("[4, 5]")));
  Tensor labels = Tensor::zeros({3}, DType::int32);
  EXPECT_THAT(
      invalid_argument_message([&] { ops::sparse_categorical_crossentropy_forward(labels, p); }),
      AllOf(HasSubstr("[3]"), HasSubstr("[4, 5]")));
}

TEST(OpErrors, SparseLabelOutOfRangeIsReported) {
  Tensor labels = Tensor::from_vector<int32_t>({0, 5}, {2});
  EXPECT_THAT(invalid_argument_message([&] {
                ops::sparse_categorical_crossentropy_forward(labels, Tensor::ones({2, 5}));
              }),
              AllOf(HasSubstr("label 5"), HasSubstr("[0, 5)")));
}

TEST(OpErrors, ConcatNamesTheMismatchedTensors) {
  EXPECT_THAT(invalid_argument_message([&] {
                ops::concat_forward({Tensor({2, 3}), Tensor({2, 4})}, 0);
              }),
              AllOf(HasSubstr("[2, 3]"), HasSubstr("[2, 4]")));
}

TEST(OpErrors, IntegerInputsToFloatingOpsAreRejected) {
  EXPECT_THAT(
      invalid_argument_message([&] { ops::relu_forward(Tensor::zeros({2}, DType::int32)); }),
      HasSubstr("int32[2]"));
}

TEST(Losses, CategoricalCrossentropyFromProbabilitiesNormalisesAndClips) {
  // Row 0: p = [0.2, 0.6] normalises to [0.25, 0.75]; loss = −log 0.75.
  // Row 1: p = [0, 1] clips 0 to 1e-7: loss with y = [1, 0] is −log 1e-7.
  Tensor t = Tensor::from_vector<double>({0, 1, 1, 0}, {2, 2});
  Tensor p = Tensor::from_vector<double>({0.2, 0.6, 0.0, 1.0}, {2, 2});
  Tensor l = ops::categorical_crossentropy_forward(t, p);
  EXPECT_NEAR(l.at(0), -std::log(0.75), 1e-12);
  EXPECT_NEAR(l.at(1), -std::log(1e-7), 1e-9);
  // Where p was clipped the gradient is zero; the unclipped entry still gets −1/Σp · (...).
  Tensor g = ops::categorical_crossentropy_backward(Tensor::ones({2}, DType::float64), t, p);
  EXPECT_EQ(g.at(2), 0.0);
}

// Zero labels' terms are skipped when the row's sum is finite and non-zero (one log per one-hot
// row); the result must be the full formula's, written here in float32 order: one-hot rows, soft
// rows, and rows with inf or NaN in p, which must still give what every term gives (NaN).
TEST(Losses, CategoricalCrossentropyEqualsTheFullSumIncludingNanAndInfRows) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  const std::vector<float> t = {0, 1, 0, 0.2f, 0.5f, 0.3f, 1, 0, 0, 0, 0, 1, 0, 1, 0};
  const std::vector<float> p = {0.1f, 0.7f, 0.2f, 0.3f, 0.3f, 0.4f, 0.5f, inf,
                                0.5f, 0.2f, nan,  0.8f, 0.0f, 0.0f, 0.0f};
  Tensor l = ops::categorical_crossentropy_forward(Tensor::from_vector<float>(t, {5, 3}),
                                                   Tensor::from_vector<float>(p, {5, 3}));
  for (int r = 0; r < 5; ++r) {
    float sum = 0, total = 0;
    for (int i = 0; i < 3; ++i) sum += p[static_cast<size_t>(3 * r + i)];
    for (int i = 0; i < 3; ++i) {
      // Keras' clip to [1e-7, 1 - 1e-7] (std::clamp keeps a NaN).
      const float q = std::clamp(p[static_cast<size_t>(3 * r + i)] / sum, static_cast<float>(1e-7),
                                 static_cast<float>(1.0 - 1e-7));
      total -= t[static_cast<size_t>(3 * r + i)] * std::log(q);
    }
    const float got = static_cast<float>(l.at(r));
    if (std::isnan(total)) {
      EXPECT_TRUE(std::isnan(got)) << "row " << r << ": " << got;
    } else {
      EXPECT_EQ(got, total) << "row " << r;
    }
  }
  EXPECT_TRUE(std::isnan(static_cast<float>(l.at(2))));  // inf in a zero-label entry
  EXPECT_TRUE(std::isnan(static_cast<float>(l.at(3))));  // NaN in a zero-label entry
}

TEST(Losses, SparseMatchesCategoricalOnOneHotLogits) {
  Generator gen(3);
  Tensor z = gen.uniform({5, 7}, -3, 3, DType::float64);
  Tensor labels = Tensor::from_vector<int64_t>({0, 6, 3, 3, 1}, {5});
  Tensor onehot = ops::one_hot(labels, 7, DType::float64);
  Tensor a = ops::sparse_categorical_crossentropy_forward(labels, z, true);
  Tensor b = ops::categorical_crossentropy_forward(onehot, z, true);
  for (int i = 0; i < 5; ++i) {
    double m = -1e300, s = 0;
    for (int j = 0; j < 7; ++j) m = std::max(m, z.at(i * 7 + j));
    for (int j = 0; j < 7; ++j) s += std::exp(z.at(i * 7 + j) - m);
    double expected = m + std::log(s) - z.at(i * 7 + static_cast<int>(labels.at(i)));
    EXPECT_NEAR(a.at(i), expected, 1e-12);
    EXPECT_NEAR(b.at(i), expected, 1e-12);
  }
}

TEST(Losses, BinaryCrossentropyAndRegressionLossesAverageOverTheLastAxis) {
  Tensor t = Tensor::from_vector<double>({1, 0, 0.5, 1}, {2, 2});
  Tensor p = Tensor::from_vector<double>({0.9, 0.2, 0.5, 1.0}, {2, 2});
  Tensor bce = ops::binary_crossentropy_forward(t, p);
  EXPECT_NEAR(bce.at(0), (-std::log(0.9) - std::log(0.8)) / 2, 1e-12);
  EXPECT_NEAR(bce.at(1), (-std::log(0.5)) / 2 + (-std::log(1 - 1e-7)) / 2, 1e-12);
  Tensor mse = ops::mean_squared_error_forward(t, p);
  EXPECT_NEAR(mse.at(0), (0.01 + 0.04) / 2, 1e-12);
  Tensor mae = ops::mean_absolute_error_forward(t, p);
  EXPECT_NEAR(mae.at(0), (0.1 + 0.2) / 2, 1e-12);
}

TEST(ShapeOps, TransposeConcatArgmaxOneHot) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(ops::transpose_forward(x).to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  Tensor c = ops::concat_forward({x, Tensor::from_vector<float>({7, 8}, {2, 1})}, 1);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{1, 2, 3, 7, 4, 5, 6, 8}));
  auto parts = ops::concat_backward(c, {3, 1}, 1);
  EXPECT_EQ(parts[0].to_vector<float>(), x.to_vector<float>());
  Tensor am = ops::argmax(Tensor::from_vector<float>({1, 9, 9, 0, -1, -2}, {2, 3}));
  EXPECT_EQ(am.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));  // first maximum wins
  Tensor oh = ops::one_hot(Tensor::from_vector<int32_t>({2, 0}, {2}), 3);
  EXPECT_EQ(oh.to_vector<float>(), (std::vector<float>{0, 0, 1, 1, 0, 0}));
}

TEST(Reductions, SumMeanMaxMatchLoopsOnOddShapes) {
  Generator gen(9);
  Tensor x = gen.uniform({7, 13}, -1, 1, DType::float32);
  Tensor s = ops::reduce_sum_forward(x, {0});
  Tensor m = ops::reduce_mean_forward(x, {1}, true);
  Tensor mx = ops::reduce_max_forward(x);
  ASSERT_EQ(s.shape(), Shape{13});
  ASSERT_EQ(m.shape(), (Shape{7, 1}));
  ASSERT_EQ(mx.shape(), Shape{});
  double all_max = -1e300;
  for (int j = 0; j < 13; ++j) {
    double acc = 0;
    for (int i = 0; i < 7; ++i) acc += x.at(i * 13 + j);
    EXPECT_NEAR(s.at(j), acc, 1e-5);
  }
  for (int i = 0; i < 7; ++i) {
    double acc = 0;
    for (int j = 0; j < 13; ++j)
      acc += x.at(i * 13 + j), all_max = std::max(all_max, x.at(i * 13 + j));
    EXPECT_NEAR(m.at(i), acc / 13, 1e-6);
  }
  EXPECT_EQ(mx.at(0), all_max);
}

TEST(SteadyState, LinearForwardBackwardDoesNotAllocateAfterWarmUp) {
  Generator gen(1);
  Tensor x = gen.uniform({128, 784}, -1, 1), k1 = gen.uniform({784, 128}, -0.1, 0.1);
  Tensor b1 = Tensor::zeros({128}), k2 = gen.uniform({128, 10}, -0.1, 0.1);
  Tensor b2 = Tensor::zeros({10}), dy = gen.uniform({128, 10}, -1, 1);
  Tensor dk1({784, 128}), db1({128}), dk2({128, 10}), db2({10}), dh({128, 128});
  auto step = [&] {
    Tensor h = ops::linear_forward(x, k1, b1, ops::FusedActivation::relu);
    Tensor y = ops::linear_forward(h, k2, b2);
    Tensor p = ops::softmax_forward(y);
    ops::linear_backward_into(dy, h, k2, y, ops::FusedActivation::none, dh, dk2, db2);
    ops::linear_backward_into(dh, x, k1, h, ops::FusedActivation::relu, Tensor(), dk1, db1);
    return p;
  };
  for (int i = 0; i < 3; ++i) step();
  const uint64_t before = storage_pool_stats().system_allocations;
  for (int i = 0; i < 100; ++i) step();
  EXPECT_EQ(storage_pool_stats().system_allocations, before);
}

}  // namespace
}  // namespace lockstep
