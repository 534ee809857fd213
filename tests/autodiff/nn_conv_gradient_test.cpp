// conv2d, conv2d_relu and max_pool2d gradients (float64) against central differences, through the
// shared checker, on odd shapes with both paddings and strides 1 and 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/nn_functions.h"
#include "testing/gradient_check.h"

namespace lockstep {
namespace {

using testing::gradients_match;
using testing::random_f64;
using V = std::vector<Tensor>;

struct ConvCase {
  int64_t stride_h, stride_w;
  ops::Padding padding;
};

class Conv2DGradient : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2DGradient, MatchesCentralDifferencesForInputKernelAndBias) {
  ConvCase c = GetParam();
  Generator gen(31);
  Tensor x = random_f64(gen, {2, 7, 6, 3});
  Tensor k = random_f64(gen, {3, 2, 3, 4});
  Tensor b = random_f64(gen, {4});
  ops::Conv2DOptions options{.strides = {c.stride_h, c.stride_w}, .padding = c.padding};
  EXPECT_TRUE(gradients_match([=](const V& in) { return conv2d(in[0], in[1], in[2], options); },
                              {x, k, b}));
  EXPECT_TRUE(gradients_match([=](const V& in) { return conv2d(in[0], in[1], Tensor(), options); },
                              {x, k}));
}

TEST_P(Conv2DGradient, ConvolutionWithReluMatchesCentralDifferences) {
  ConvCase c = GetParam();
  Generator gen(32);
  Tensor x = random_f64(gen, {2, 7, 6, 3});
  Tensor k = random_f64(gen, {3, 2, 3, 4});
  Tensor b = random_f64(gen, {4});
  ops::Conv2DOptions options{.strides = {c.stride_h, c.stride_w}, .padding = c.padding};
  EXPECT_TRUE(gradients_match(
      [=](const V& in) { return conv2d_relu(in[0], in[1], in[2], options); }, {x, k, b}));
  EXPECT_TRUE(gradients_match(
      [=](const V& in) { return conv2d_relu(in[0], in[1], Tensor(), options); }, {x, k}));
}

INSTANTIATE_TEST_SUITE_P(StridesAndPaddings, Conv2DGradient,
                         ::testing::Values(ConvCase{1, 1, ops::Padding::valid},
                                           ConvCase{1, 1, ops::Padding::same},
                                           ConvCase{2, 2, ops::Padding::valid},
                                           ConvCase{2, 2, ops::Padding::same},
                                           ConvCase{2, 1, ops::Padding::same}));

// Distinct values at least 0.01 apart, so a central difference (eps 1e-6) never changes which
// element wins a window.
Tensor distinct_values(Generator& gen, const Shape& shape) {
  std::vector<double> v;
  for (int64_t i = 0; i < shape.num_elements(); ++i) v.push_back(0.01 * static_cast<double>(i));
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[gen.uniform_int(i)]);
  return Tensor::from_vector<double>(v, shape);
}

struct PoolCase {
  int64_t pool, stride;
  ops::Padding padding;
};

class MaxPool2DGradient : public ::testing::TestWithParam<PoolCase> {};

TEST_P(MaxPool2DGradient, MatchesCentralDifferences) {
  PoolCase c = GetParam();
  Generator gen(5);
  Tensor x = distinct_values(gen, {3, 7, 7, 5});
  ops::Pool2DOptions options{
      .pool_size = {c.pool, c.pool}, .strides = {c.stride, c.stride}, .padding = c.padding};
  EXPECT_TRUE(gradients_match([=](const V& in) { return max_pool2d(in[0], options); }, {x}));
}

INSTANTIATE_TEST_SUITE_P(WindowsAndPaddings, MaxPool2DGradient,
                         ::testing::Values(PoolCase{2, 2, ops::Padding::valid},
                                           PoolCase{2, 2, ops::Padding::same},
                                           PoolCase{3, 2, ops::Padding::valid},  // overlapping
                                           PoolCase{3, 2, ops::Padding::same},
                                           PoolCase{3, 1, ops::Padding::same}));

TEST(Conv2DGradient, ThroughPoolingAndASecondConvolution) {
  Generator gen(77);
  Tensor x = random_f64(gen, {2, 7, 7, 3});
  Tensor k1 = random_f64(gen, {3, 3, 3, 4});
  Tensor k2 = random_f64(gen, {2, 2, 4, 5});
  auto f = [](const V& in) {
    Tensor h = conv2d(in[0], in[1], Tensor(), {.padding = ops::Padding::same});
    h = max_pool2d(h, {.pool_size = {2, 2}, .padding = ops::Padding::same});
    return conv2d(h, in[2], Tensor(), {.strides = {2, 2}});
  };
  EXPECT_TRUE(gradients_match(f, {x, k1, k2}));
}

// float32: conv2d_relu's gradients are those of relu(conv2d(...)) bit for bit (the same dz, the
// same oneDNN backward passes).
TEST(Conv2DGradient, ConvolutionWithReluGivesTheGradientsOfTheTwoOps) {
  Generator gen(9);
  Tensor x = gen.uniform({3, 9, 8, 2}, -1, 1);
  Tensor k = gen.uniform({3, 3, 2, 5}, -1, 1);
  Tensor b = gen.uniform({5}, -1, 1);
  Tensor dy = gen.uniform({3, 9, 8, 5}, -1, 1);
  auto grads = [&](bool fused) {
    GradientTape tape;
    tape.watch(x);
    tape.watch(k);
    tape.watch(b);
    Tensor y = fused ? conv2d_relu(x, k, b, {.padding = ops::Padding::same})
                     : relu(conv2d(x, k, b, {.padding = ops::Padding::same}));
    return tape.gradient(reduce_sum(mul(y, dy)), std::vector<Tensor>{x, k, b});
  };
  const std::vector<Tensor> fused = grads(true), separate = grads(false);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(fused[i].to_vector<float>(), separate[i].to_vector<float>()) << "gradient " << i;
  }
}

TEST(Conv2DGradient, UntrackedInputGetsNoGradientButKernelDoes) {
  Generator gen(1);
  Tensor x = random_f64(gen, {1, 5, 5, 2});
  Tensor k = random_f64(gen, {3, 3, 2, 3});
  GradientTape tape;
  tape.watch(k);
  Tensor y = conv2d(x, k);
  std::vector<Tensor> g = tape.gradient(y, std::vector<Tensor>{x, k});
  EXPECT_FALSE(g[0].defined());
  ASSERT_TRUE(g[1].defined());
  EXPECT_EQ(g[1].shape(), k.shape());
}

}  // namespace
}  // namespace lockstep
