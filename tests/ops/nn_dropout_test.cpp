#include "lockstep/ops/nn_dropout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace lockstep::ops {
namespace {

using ::testing::HasSubstr;

TEST(Dropout, KeepsWhereTheGeneratorsUniformIsAtLeastRateAndRescales) {
  const double rate = 0.3;
  Generator data_gen(1);
  Tensor x = data_gen.uniform({3, 7, 5}, -2, 2);
  Generator gen(99, 4);
  DropoutResult r = dropout_forward(x, rate, gen);

  Generator replay(99, 4);  // the same stream, drawn here one value per element
  std::vector<float> xs = x.to_vector<float>(), ys = r.output.to_vector<float>();
  std::vector<uint8_t> mask = r.mask.to_vector<uint8_t>();
  for (size_t i = 0; i < xs.size(); ++i) {
    bool keep = replay.uniform() >= static_cast<float>(rate);
    EXPECT_EQ(mask[i], keep ? 1 : 0);
    EXPECT_FLOAT_EQ(ys[i], keep ? static_cast<float>(xs[i] / (1.0 - rate)) : 0.0f);
  }
  // The generator advanced by exactly one draw per element.
  EXPECT_EQ(gen.next_u32(), replay.next_u32());
}

TEST(Dropout, SameSeedGivesTheSameMaskAndOtherSeedsDoNot) {
  Tensor x = Tensor::ones({1000});
  Generator a(5), b(5), c(6);
  EXPECT_EQ(dropout_forward(x, 0.5, a).mask.to_vector<uint8_t>(),
            dropout_forward(x, 0.5, b).mask.to_vector<uint8_t>());
  EXPECT_NE(dropout_forward(x, 0.5, a).mask.to_vector<uint8_t>(),
            dropout_forward(x, 0.5, c).mask.to_vector<uint8_t>());
}

TEST(Dropout, KeepsAboutOneMinusRateAndPreservesTheMean) {
  const int64_t n = 100000;
  Generator gen(11);
  DropoutResult r = dropout_forward(Tensor::ones({n}), 0.25, gen);
  double kept = 0, sum = 0;
  for (uint8_t m : r.mask.to_vector<uint8_t>()) kept += m;
  for (float v : r.output.to_vector<float>()) sum += v;
  double sigma = std::sqrt(n * 0.25 * 0.75);
  EXPECT_NEAR(kept, 0.75 * n, 5 * sigma);
  EXPECT_NEAR(sum / n, 1.0, 5 * sigma / (0.75 * n));
}

TEST(Dropout, BackwardAppliesTheForwardMask) {
  Generator gen(2);
  Tensor x = Tensor::ones({4, 9}, DType::float64);
  DropoutResult r = dropout_forward(x, 0.4, gen);
  Tensor dy = Generator(8).uniform({4, 9}, -1, 1, DType::float64);
  std::vector<double> g = dropout_backward(dy, r.mask, 0.4).to_vector<double>();
  std::vector<double> d = dy.to_vector<double>();
  std::vector<uint8_t> m = r.mask.to_vector<uint8_t>();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_DOUBLE_EQ(g[i], m[i] ? d[i] / 0.6 : 0.0);
}

TEST(Dropout, BFloat16KeepsValuesRescaled) {
  Generator gen(3);
  Tensor x = Tensor::full({64}, 1.5, DType::bfloat16);
  DropoutResult r = dropout_forward(x, 0.5, gen);
  EXPECT_EQ(r.output.dtype(), DType::bfloat16);
  std::vector<float> y = r.output.to_vector<float>();
  std::vector<uint8_t> m = r.mask.to_vector<uint8_t>();
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], m[i] ? 3.0f : 0.0f);
}

TEST(Dropout, RateZeroIsTheIdentityAndDrawsNothing) {
  Generator gen(4), untouched(4);
  Tensor x = Tensor::ones({10});
  DropoutResult r = dropout_forward(x, 0.0, gen);
  EXPECT_TRUE(r.output.shares_storage_with(x));
  EXPECT_FALSE(r.mask.defined());
  EXPECT_EQ(gen.next_u32(), untouched.next_u32());
  EXPECT_EQ(dropout_backward(x, r.mask, 0.0).to_vector<float>(), x.to_vector<float>());
}

TEST(Dropout, RejectsRatesOutsideZeroToOne) {
  Generator gen;
  Tensor x = Tensor::ones({2});
  EXPECT_THROW(dropout_forward(x, 1.0, gen), InvalidArgument);
  EXPECT_THROW(dropout_forward(x, -0.1, gen), InvalidArgument);
  try {
    dropout_forward(x, std::nan(""), gen);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("rate"));
  }
}

TEST(Dropout, BackwardRejectsAMaskOfAnotherShape) {
  Tensor mask = Tensor::ones({3, 2}, DType::uint8);
  try {
    dropout_backward(Tensor::ones({2, 3}), mask, 0.5);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::AllOf(HasSubstr("float32[2, 3]"), HasSubstr("uint8[3, 2]")));
  }
}

}  // namespace
}  // namespace lockstep::ops
