// max_pool2d against float64 loops written here from the definition.
#include "lockstep/ops/nn_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "lockstep/core/random.h"

namespace lockstep::ops {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

struct Case {
  int64_t n, h, w, c, ph, pw, sh, sw;
  Padding padding;
};

struct Reference {
  Case c;
  int64_t oh, ow, pt, pl;
  std::vector<double> x, dy;

  // TensorFlow's rule, restated.
  static void geometry(int64_t in, int64_t k, int64_t s, Padding p, int64_t& out, int64_t& pad) {
    out = p == Padding::valid ? (in - k) / s + 1 : (in + s - 1) / s;
    pad = p == Padding::valid ? 0 : std::max<int64_t>((out - 1) * s + k - in, 0) / 2;
  }
  explicit Reference(const Case& cs) : c(cs) {
    geometry(c.h, c.ph, c.sh, c.padding, oh, pt);
    geometry(c.w, c.pw, c.sw, c.padding, ow, pl);
  }
  size_t at(int64_t n, int64_t h, int64_t w, int64_t ch) const {
    return static_cast<size_t>(((n * c.h + h) * c.w + w) * c.c + ch);
  }

  // For each output: the max and the first input position holding it.
  void forward(std::vector<double>& y, std::vector<size_t>& src) const {
    for (int64_t n = 0; n < c.n; ++n)
      for (int64_t r = 0; r < oh; ++r)
        for (int64_t q = 0; q < ow; ++q)
          for (int64_t ch = 0; ch < c.c; ++ch) {
            double best = -std::numeric_limits<double>::infinity();
            size_t best_at = 0;
            for (int64_t i = 0; i < c.ph; ++i)
              for (int64_t j = 0; j < c.pw; ++j) {
                int64_t h = r * c.sh + i - pt, w = q * c.sw + j - pl;
                if (h < 0 || h >= c.h || w < 0 || w >= c.w) continue;
                if (x[at(n, h, w, ch)] > best) best = x[at(n, h, w, ch)], best_at = at(n, h, w, ch);
              }
            y.push_back(best);
            src.push_back(best_at);
          }
  }
};

class MaxPool2DMatchesReference : public ::testing::TestWithParam<std::tuple<DType, Case>> {};

TEST_P(MaxPool2DMatchesReference, ForwardAndBackward) {
  auto [dtype, c] = GetParam();
  Reference ref(c);
  Generator gen(3);
  // Distinct values, so that the winner of each window is unambiguous in every dtype.
  std::vector<double> pool;
  for (int64_t i = 0; i < c.n * c.h * c.w * c.c; ++i) pool.push_back(static_cast<double>(i) / 8);
  for (size_t i = pool.size(); i > 1; --i) std::swap(pool[i - 1], pool[gen.uniform_int(i)]);
  Tensor x = Tensor::from_vector<double>(pool, {c.n, c.h, c.w, c.c}).to(dtype);
  ref.x = x.to_vector<double>();
  Tensor dy = gen.uniform({c.n, ref.oh, ref.ow, c.c}, -1, 1, DType::float64).to(dtype);
  ref.dy = dy.to_vector<double>();

  std::vector<double> y;
  std::vector<size_t> src;
  ref.forward(y, src);
  Pool2DOptions options{.pool_size = {c.ph, c.pw}, .strides = {c.sh, c.sw}, .padding = c.padding};
  MaxPool2DResult r = max_pool2d_forward(x, options);
  ASSERT_EQ(r.output.shape(), Shape({c.n, ref.oh, ref.ow, c.c}));
  EXPECT_EQ(r.output.dtype(), dtype);
  EXPECT_EQ(r.output.to_vector<double>(), y);

  std::vector<double> dx(ref.x.size(), 0.0);
  for (size_t e = 0; e < src.size(); ++e) dx[src[e]] += ref.dy[e];
  Tensor got = max_pool2d_backward(dy, r.argmax, x.shape());
  ASSERT_EQ(got.shape(), x.shape());
  std::vector<double> g = got.to_vector<double>();
  double tol = dtype == DType::bfloat16 ? 1e-2 : dtype == DType::float32 ? 1e-6 : 1e-15;
  for (size_t i = 0; i < dx.size(); ++i) {
    EXPECT_NEAR(g[i], dx[i], tol * std::max(1.0, std::abs(dx[i]))) << "element " << i;
  }
  // Given the options (the window-by-window path where windows do not overlap): the scatter's bits.
  EXPECT_EQ(max_pool2d_backward(dy, r.argmax, x.shape(), options).to_vector<double>(), g);
}

const Case kCases[] = {
    {3, 7, 7, 5, 2, 2, 2, 2, Padding::valid},
    {3, 7, 7, 5, 2, 2, 2, 2, Padding::same},
    {3, 7, 7, 5, 3, 3, 2, 2, Padding::valid},
    {3, 7, 7, 5, 3, 3, 2, 2, Padding::same},
    {2, 6, 9, 3, 3, 2, 1, 3, Padding::same},
    {2, 5, 5, 1, 3, 3, 1, 1, Padding::valid},
    // Strides beyond the window: positions no window covers.
    {2, 8, 9, 4, 2, 2, 3, 3, Padding::valid},
    {2, 7, 8, 3, 2, 3, 3, 4, Padding::same},
};

INSTANTIATE_TEST_SUITE_P(AllDtypes, MaxPool2DMatchesReference,
                         ::testing::Combine(::testing::Values(DType::float32, DType::bfloat16,
                                                              DType::float64),
                                            ::testing::ValuesIn(kCases)));

TEST(MaxPool2D, StridesDefaultToPoolSize) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
                                        {1, 4, 4, 1});
  MaxPool2DResult r = max_pool2d_forward(x, {.pool_size = {2, 2}});
  EXPECT_EQ(r.output.shape(), Shape({1, 2, 2, 1}));
  EXPECT_EQ(r.output.to_vector<float>(), (std::vector<float>{6, 8, 14, 16}));
}

TEST(MaxPool2D, PaddingNeverWinsOverNegativeValues) {
  Tensor x = Tensor::full({1, 3, 3, 1}, -5.0);
  MaxPool2DResult r = max_pool2d_forward(x, {.pool_size = {2, 2}, .padding = Padding::same});
  EXPECT_EQ(r.output.to_vector<float>(), (std::vector<float>(4, -5.0f)));
}

TEST(MaxPool2D, NaNPropagates) {
  Tensor x = Tensor::from_vector<float>({1, std::nanf(""), 3, 4}, {1, 2, 2, 1});
  EXPECT_TRUE(std::isnan(max_pool2d_forward(x, {}).output.item()));
}

// Per channel of one 2x2 window (NHWC, 3 channels): channel 0 has a tie (the first position
// wins), channel 1 two NaNs (the first NaN wins), channel 2 its maximum last.
TEST(MaxPool2D, TiesKeepTheFirstPositionAndTheFirstNaNWinsPerChannel) {
  const float nan = std::nanf("");
  // Positions (row-major over the window) 0..3, channels interleaved.
  Tensor x = Tensor::from_vector<float>({1, 0, 1,    //
                                         7, nan, 2,  //
                                         7, 5, 3,    //
                                         2, nan, 9},
                                        {1, 2, 2, 3});
  MaxPool2DResult r = max_pool2d_forward(x, {});
  const std::vector<int64_t> at = r.argmax.to_vector<int64_t>();
  EXPECT_EQ(at, (std::vector<int64_t>{1 * 3 + 0, 1 * 3 + 1, 3 * 3 + 2}));
  EXPECT_EQ(r.output.data<float>()[0], 7.0f);
  EXPECT_TRUE(std::isnan(r.output.data<float>()[1]));
  EXPECT_EQ(r.output.data<float>()[2], 9.0f);
}

TEST(MaxPool2D, RejectsWrongRankNamingTheShape) {
  try {
    max_pool2d_forward(Tensor({3, 7, 7}));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("max_pool2d"), HasSubstr("float32[3, 7, 7]")));
  }
}

TEST(MaxPool2D, RejectsValidWindowLargerThanInput) {
  try {
    max_pool2d_forward(Tensor({1, 2, 7, 1}), {.pool_size = {3, 3}});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("float32[1, 2, 7, 1]"), HasSubstr("[3, 3]")));
  }
}

// The window-by-window backward writes 0 + dy as the scatter adds dy to 0: a -0 gradient comes
// out +0, a NaN stays NaN.
TEST(MaxPool2D, BackwardGivenTheOptionsKeepsTheScattersSignedZerosAndNaN) {
  Tensor x = Generator(3).uniform({1, 4, 4, 2}, -1, 1);
  const Pool2DOptions options{.pool_size = {2, 2}};
  MaxPool2DResult r = max_pool2d_forward(x, options);
  Tensor dy = Tensor::from_vector<float>(
      {-0.0f, 1.5f, std::numeric_limits<float>::quiet_NaN(), -2.0f, 0.0f, -0.0f, 3.0f, 4.0f},
      {1, 2, 2, 2});
  const std::vector<float> scattered =
      max_pool2d_backward(dy, r.argmax, x.shape()).to_vector<float>();
  const std::vector<float> got =
      max_pool2d_backward(dy, r.argmax, x.shape(), options).to_vector<float>();
  ASSERT_EQ(got.size(), scattered.size());
  int nans = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(scattered[i])) {
      ++nans;
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i;
    } else {
      EXPECT_EQ(std::signbit(got[i]), std::signbit(scattered[i])) << "element " << i;
      EXPECT_EQ(got[i], scattered[i]) << "element " << i;
    }
  }
  EXPECT_EQ(nans, 1);
}

TEST(MaxPool2D, BackwardGivenTheOptionsRejectsAnArgmaxOutsideItsWindow) {
  Tensor x = Generator(4).uniform({1, 4, 4, 1}, -1, 1);
  const Pool2DOptions options{.pool_size = {2, 2}};
  MaxPool2DResult r = max_pool2d_forward(x, options);
  r.argmax.data<int64_t>()[0] = 15;  // the last window's corner, in range but not window 0's
  try {
    max_pool2d_backward(Tensor::ones({1, 2, 2, 1}), r.argmax, x.shape(), options);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr("not in their own windows"), HasSubstr("int64[1, 2, 2, 1]")));
  }
}

TEST(MaxPool2D, BackwardRejectsAnArgmaxOutsideTheInput) {
  Tensor argmax = Tensor::zeros({1, 2, 2, 1}, DType::int64);
  argmax.data<int64_t>()[3] = 16;
  try {
    max_pool2d_backward(Tensor::ones({1, 2, 2, 1}), argmax, {1, 4, 4, 1});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("argmax 16"), HasSubstr("element 3")));
  }
}

TEST(MaxPool2D, BackwardRejectsMismatchedArgmax) {
  Tensor dy = Tensor::zeros({1, 2, 2, 1});
  Tensor argmax = Tensor::zeros({1, 2, 3, 1}, DType::int64);
  try {
    max_pool2d_backward(dy, argmax, {1, 4, 4, 1});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("float32[1, 2, 2, 1]"), HasSubstr("int64[1, 2, 3, 1]")));
  }
}

}  // namespace
}  // namespace lockstep::ops
