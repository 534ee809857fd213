// Conv2D and MaxPooling2D values against float64 loops written here from TensorFlow's window
// rules (out = ceil(in / stride) for "same", the odd padding element after).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "lockstep/keras/keras_tensor.h"
#include "lockstep/keras/layers/convolutional.h"
#include "testing/gradient_check.h"

namespace lockstep::keras::layers {
namespace {

struct Axis {
  int64_t out, pad_before;
};

Axis same_axis(int64_t in, int64_t k, int64_t s) {
  const int64_t out = (in + s - 1) / s;
  const int64_t total = std::max<int64_t>((out - 1) * s + k - in, 0);
  return {out, total / 2};
}

TEST(Conv2D, SamePaddingStridedMatchesANaiveLoop) {
  Conv2D conv({.filters = 2,
               .kernel_size = {3, 2},
               .strides = {2, 2},
               .padding = "same",
               .dtype = "float64"});
  Generator gen(11);
  const Tensor x = lockstep::testing::random_f64(gen, {2, 7, 5, 3});
  conv(x);  // builds
  const Tensor k = lockstep::testing::random_f64(gen, {3, 2, 3, 2});
  const Tensor b = lockstep::testing::random_f64(gen, {2});
  conv.kernel().assign(k);
  conv.bias().assign(b);
  const Tensor y = conv(x);

  const Axis ah = same_axis(7, 3, 2), aw = same_axis(5, 2, 2);
  ASSERT_EQ(y.shape(), (Shape{2, ah.out, aw.out, 2}));
  const double* px = x.data<double>();
  const double* pk = k.data<double>();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t oh = 0; oh < ah.out; ++oh)
      for (int64_t ow = 0; ow < aw.out; ++ow)
        for (int64_t o = 0; o < 2; ++o) {
          double want = b.data<double>()[o];
          for (int64_t i = 0; i < 3; ++i)
            for (int64_t j = 0; j < 2; ++j)
              for (int64_t c = 0; c < 3; ++c) {
                const int64_t h = oh * 2 + i - ah.pad_before, w = ow * 2 + j - aw.pad_before;
                if (h < 0 || h >= 7 || w < 0 || w >= 5) continue;
                want += px[((n * 7 + h) * 5 + w) * 3 + c] * pk[((i * 2 + j) * 3 + c) * 2 + o];
              }
          const double got = y.data<double>()[((n * ah.out + oh) * aw.out + ow) * 2 + o];
          EXPECT_NEAR(got, want, 1e-12) << n << " " << oh << " " << ow << " " << o;
        }
}

TEST(Conv2D, BuildsAKernelInKerasLayoutWithGlorotBounds) {
  Conv2D conv({.filters = 5, .kernel_size = {3, 3}});
  conv(Tensor::zeros({1, 4, 4, 2}));
  ASSERT_EQ(conv.kernel().shape(), (Shape{3, 3, 2, 5}));
  // Keras' fans for a conv kernel: fan_in = 3*3*2 = 18, fan_out = 3*3*5 = 45.
  const double limit = std::sqrt(6.0 / (18 + 45));
  const Tensor k = conv.kernel().raw_value();
  for (int64_t i = 0; i < k.num_elements(); ++i) EXPECT_LE(std::abs(k.data<float>()[i]), limit);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(conv.bias().raw_value().data<float>()[i], 0.0f);
}

TEST(Conv2D, RejectsBadOptionsAndInputs) {
  EXPECT_THROW(Conv2D({.filters = 0, .kernel_size = {3, 3}}), InvalidArgument);
  EXPECT_THROW(Conv2D({.filters = 1, .kernel_size = {0, 3}}), InvalidArgument);
  EXPECT_THROW(Conv2D({.filters = 1, .kernel_size = {3, 3}, .padding = "full"}), InvalidArgument);
  EXPECT_THROW(Conv2D({.filters = 1, .kernel_size = {3, 3}, .activation = "nope"}),
               InvalidArgument);
  Conv2D conv({.filters = 1, .kernel_size = {3, 3}});
  EXPECT_THROW(conv(Tensor::zeros({1, 4, 4})), InvalidArgument);     // not NHWC
  EXPECT_THROW(conv(Tensor::zeros({1, 2, 4, 1})), InvalidArgument);  // window does not fit
  conv(Tensor::zeros({1, 4, 4, 2}));
  EXPECT_THROW(conv(Tensor::zeros({1, 4, 4, 3})), InvalidArgument);  // channel count changed
}

TEST(Conv2D, SymbolicCallKeepsTheBatchUnknown) {
  auto x = Input({9, 7, 3});
  auto y = Conv2D({.filters = 4, .kernel_size = {3, 3}, .strides = {2, 2}})(x);
  EXPECT_EQ(y.shape(), (Shape{0, 4, 3, 4}));
}

TEST(MaxPooling2D, ValidOverlappingWindowsTakeTheMaximum) {
  // 1 2 3 / 4 5 6 / 7 8 9, 2x2 windows moved by 1: 5 6 / 8 9.
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 3, 3, 1});
  Tensor y = MaxPooling2D({.pool_size = {2, 2}, .strides = {1, 1}})(x);
  ASSERT_EQ(y.shape(), (Shape{1, 2, 2, 1}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{5, 6, 8, 9}));
}

TEST(MaxPooling2D, SamePaddingNeverLetsPaddingWin) {
  // Same padding on 3x3 with 2x2 stride 2 pads one row/column after: windows {-1,-2,-4,-5},
  // {-3,-6}, {-7,-8}, {-9}; the padding (zeros in a convolution) must not win.
  Tensor x = Tensor::from_vector<float>({-1, -2, -3, -4, -5, -6, -7, -8, -9}, {1, 3, 3, 1});
  Tensor y = MaxPooling2D({.padding = "same"})(x);
  ASSERT_EQ(y.shape(), (Shape{1, 2, 2, 1}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{-1, -3, -7, -9}));
}

TEST(MaxPooling2D, StridesDefaultToPoolSizeInTheConfig) {
  MaxPooling2D pool({.pool_size = {3, 2}});
  EXPECT_EQ(pool.get_config()["strides"], nlohmann::json({3, 2}));
  EXPECT_EQ(pool.compute_output_shape({4, 7, 5, 2}), (Shape{4, 2, 2, 2}));
}

}  // namespace
}  // namespace lockstep::keras::layers
