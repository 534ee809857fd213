// conv2d's oneDNN path (float32, bfloat16) and loop path (float64) against float64 loops written
// here from the definition, on shapes that are not multiples of any vector width.
#include "lockstep/ops/nn_conv.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "lockstep/core/random.h"
#include "lockstep/ops/activations.h"

namespace lockstep::ops {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

struct Case {
  int64_t n, h, w, c, kh, kw, o, sh, sw;
  Padding padding;
};

// TensorFlow's padding, restated here rather than taken from window_geometry.
void pads(int64_t in, int64_t k, int64_t s, Padding p, int64_t& out, int64_t& before) {
  if (p == Padding::valid) {
    out = (in - k) / s + 1;
    before = 0;
  } else {
    out = (in + s - 1) / s;
    before = std::max<int64_t>((out - 1) * s + k - in, 0) / 2;
  }
}

struct Reference {
  Case c;
  int64_t oh, ow, pt, pl;
  std::vector<double> x, k, b, dy;

  double X(int64_t n, int64_t h, int64_t w, int64_t ch) const {
    if (h < 0 || h >= c.h || w < 0 || w >= c.w) return 0.0;
    return x[static_cast<size_t>(((n * c.h + h) * c.w + w) * c.c + ch)];
  }
  double K(int64_t i, int64_t j, int64_t ch, int64_t o) const {
    return k[static_cast<size_t>(((i * c.kw + j) * c.c + ch) * c.o + o)];
  }
  double DY(int64_t n, int64_t h, int64_t w, int64_t o) const {
    return dy[static_cast<size_t>(((n * oh + h) * ow + w) * c.o + o)];
  }

  std::vector<double> forward() const {
    std::vector<double> y;
    for (int64_t n = 0; n < c.n; ++n)
      for (int64_t r = 0; r < oh; ++r)
        for (int64_t q = 0; q < ow; ++q)
          for (int64_t o = 0; o < c.o; ++o) {
            double s = b.empty() ? 0.0 : b[static_cast<size_t>(o)];
            for (int64_t i = 0; i < c.kh; ++i)
              for (int64_t j = 0; j < c.kw; ++j)
                for (int64_t ch = 0; ch < c.c; ++ch)
                  s += X(n, r * c.sh + i - pt, q * c.sw + j - pl, ch) * K(i, j, ch, o);
            y.push_back(s);
          }
    return y;
  }

  // Gather form: input position h receives from output row r through tap i when
  // r * sh + i - pt == h.
  std::vector<double> backward_input() const {
    std::vector<double> dx;
    for (int64_t n = 0; n < c.n; ++n)
      for (int64_t h = 0; h < c.h; ++h)
        for (int64_t w = 0; w < c.w; ++w)
          for (int64_t ch = 0; ch < c.c; ++ch) {
            double s = 0;
            for (int64_t i = 0; i < c.kh; ++i)
              for (int64_t j = 0; j < c.kw; ++j) {
                int64_t rr = h + pt - i, qq = w + pl - j;
                if (rr < 0 || qq < 0 || rr % c.sh || qq % c.sw) continue;
                int64_t r = rr / c.sh, q = qq / c.sw;
                if (r >= oh || q >= ow) continue;
                for (int64_t o = 0; o < c.o; ++o) s += DY(n, r, q, o) * K(i, j, ch, o);
              }
            dx.push_back(s);
          }
    return dx;
  }

  std::vector<double> backward_kernel() const {
    std::vector<double> dk;
    for (int64_t i = 0; i < c.kh; ++i)
      for (int64_t j = 0; j < c.kw; ++j)
        for (int64_t ch = 0; ch < c.c; ++ch)
          for (int64_t o = 0; o < c.o; ++o) {
            double s = 0;
            for (int64_t n = 0; n < c.n; ++n)
              for (int64_t r = 0; r < oh; ++r)
                for (int64_t q = 0; q < ow; ++q)
                  s += X(n, r * c.sh + i - pt, q * c.sw + j - pl, ch) * DY(n, r, q, o);
            dk.push_back(s);
          }
    return dk;
  }

  std::vector<double> backward_bias() const {
    std::vector<double> db(static_cast<size_t>(c.o), 0.0);
    for (size_t e = 0; e < dy.size(); ++e) db[e % static_cast<size_t>(c.o)] += dy[e];
    return db;
  }
};

// max |a - b| / max |b|: elementwise relative error is meaningless for outputs near zero.
double relative_error(const Tensor& actual, const std::vector<double>& expected) {
  std::vector<double> a = actual.to_vector<double>();
  EXPECT_EQ(a.size(), expected.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), expected.size()); ++i) {
    diff = std::max(diff, std::abs(a[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  return diff / std::max(scale, 1e-300);
}

// Random values in `dtype`, plus the same values (after rounding to `dtype`) as doubles.
Tensor random_tensor(Generator& gen, const Shape& shape, DType dtype, std::vector<double>& values) {
  Tensor t = gen.uniform(shape, -1.0, 1.0, DType::float64).to(dtype);
  values = t.to_vector<double>();
  return t;
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return 1e-5;
    case DType::bfloat16:
      return 1e-2;
    default:
      return 1e-12;
  }
}

class Conv2DMatchesReference : public ::testing::TestWithParam<std::tuple<DType, Case>> {};

// One case's operands in `dtype` and the same values (rounded to it) in the float64 reference.
struct Operands {
  Reference ref;
  Tensor x, k, b, dy;
  Conv2DOptions options;
};

Operands operands(DType dtype, const Case& c, uint64_t seed) {
  Operands o{Reference{c, 0, 0, 0, 0, {}, {}, {}, {}}, {}, {}, {}, {}, {}};
  Reference& ref = o.ref;
  pads(c.h, c.kh, c.sh, c.padding, ref.oh, ref.pt);
  pads(c.w, c.kw, c.sw, c.padding, ref.ow, ref.pl);
  Generator gen(seed);
  o.x = random_tensor(gen, {c.n, c.h, c.w, c.c}, dtype, ref.x);
  o.k = random_tensor(gen, {c.kh, c.kw, c.c, c.o}, dtype, ref.k);
  o.b = random_tensor(gen, {c.o}, dtype, ref.b);
  o.dy = random_tensor(gen, {c.n, ref.oh, ref.ow, c.o}, dtype, ref.dy);
  o.options = {.strides = {c.sh, c.sw}, .padding = c.padding};
  return o;
}

TEST_P(Conv2DMatchesReference, ForwardAndBackward) {
  auto [dtype, c] = GetParam();
  const Operands o = operands(dtype, c, 42);
  const Reference& ref = o.ref;
  const Tensor &x = o.x, &k = o.k, &b = o.b, &dy = o.dy;
  const Conv2DOptions& options = o.options;

  Tensor y = conv2d_forward(x, k, b, options);
  EXPECT_EQ(y.shape(), Shape({c.n, ref.oh, ref.ow, c.o}));
  EXPECT_EQ(y.dtype(), dtype);
  EXPECT_LT(relative_error(y, ref.forward()), tolerance(dtype));

  Tensor dx = conv2d_backward_input(dy, k, x.shape(), options);
  EXPECT_EQ(dx.shape(), x.shape());
  EXPECT_LT(relative_error(dx, ref.backward_input()), tolerance(dtype));

  Tensor dk = conv2d_backward_kernel(dy, x, k.shape(), options);
  EXPECT_EQ(dk.shape(), k.shape());
  EXPECT_LT(relative_error(dk, ref.backward_kernel()), tolerance(dtype));

  EXPECT_LT(relative_error(conv2d_backward_bias(dy), ref.backward_bias()), tolerance(dtype));

  // A second call reuses the cached primitives and must give the same numbers.
  Tensor again = conv2d_forward(x, k, b, options);
  EXPECT_EQ(again.to_vector<double>(), y.to_vector<double>());
}

const Case kCases[] = {
    {3, 7, 7, 5, 3, 3, 6, 1, 1, Padding::valid}, {3, 7, 7, 5, 3, 3, 6, 1, 1, Padding::same},
    {3, 7, 7, 5, 3, 3, 6, 2, 2, Padding::valid}, {3, 7, 7, 5, 3, 3, 6, 2, 2, Padding::same},
    {2, 6, 9, 3, 4, 2, 7, 2, 3, Padding::same},  {2, 6, 9, 3, 4, 2, 7, 3, 1, Padding::valid},
    {1, 5, 5, 1, 1, 1, 1, 1, 1, Padding::same},
};

INSTANTIATE_TEST_SUITE_P(AllDtypes, Conv2DMatchesReference,
                         ::testing::Combine(::testing::Values(DType::float32, DType::bfloat16,
                                                              DType::float64),
                                            ::testing::ValuesIn(kCases)));

// Conv2D(activation="relu") as one op: the forward pass against the rectified float64 reference
// (the same bound as conv2d's), the backward pass bit for bit what relu_backward and
// conv2d_backward_bias give one after the other, and the bias gradient exactly a float64 sum of
// dz written here (each channel's terms added in order, then rounded once).
class Conv2DReluMatchesReference : public ::testing::TestWithParam<std::tuple<DType, Case>> {};

TEST_P(Conv2DReluMatchesReference, ForwardAndTheBackwardsFirstStep) {
  auto [dtype, c] = GetParam();
  const Operands o = operands(dtype, c, 43);
  const Reference& ref = o.ref;
  const Tensor &x = o.x, &k = o.k, &b = o.b, &dy = o.dy;
  const Conv2DOptions& options = o.options;

  Tensor y = conv2d_relu_forward(x, k, b, options);
  EXPECT_EQ(y.dtype(), dtype);
  std::vector<double> rectified = ref.forward();
  for (double& v : rectified) v = std::max(v, 0.0);
  EXPECT_LT(relative_error(y, rectified), tolerance(dtype));

  for (bool with_bias : {true, false}) {
    ConvReluGrad g = conv2d_relu_backward_bias(dy, y, with_bias);
    const Tensor dz = relu_backward(dy, y);
    EXPECT_EQ(g.dz.to_vector<double>(), dz.to_vector<double>());
    ASSERT_EQ(g.dbias.defined(), with_bias);
    if (!with_bias) continue;
    EXPECT_EQ(g.dbias.to_vector<double>(), conv2d_backward_bias(dz).to_vector<double>());
    const std::vector<double> dzv = dz.to_vector<double>();
    std::vector<double> sums(static_cast<size_t>(c.o), 0.0);
    for (size_t e = 0; e < dzv.size(); ++e) sums[e % static_cast<size_t>(c.o)] += dzv[e];
    const Tensor expected = Tensor::from_vector<double>(sums, {c.o}).to(dtype);
    EXPECT_EQ(g.dbias.to_vector<double>(), expected.to_vector<double>());
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, Conv2DReluMatchesReference,
                         ::testing::Combine(::testing::Values(DType::float32, DType::bfloat16,
                                                              DType::float64),
                                            ::testing::ValuesIn(kCases)));

// oneDNN's relu turns NaN into 0: outputs that are NaN (a NaN in the input, inf - inf) or infinite
// (an infinity in the input, finite products that overflow) must come out as relu keeping NaN gives
// them. (Kernels that fuse multiply and add never form inf - inf from finite operands: the exact
// product of two finite numbers is finite; others do.)
TEST(Conv2DRelu, NanInfinityAndOverflowComeOutAsReluOfTheConvolution) {
  Generator gen(8);
  const Tensor k = gen.uniform({3, 3, 2, 4}, -1, 1);
  const Tensor b = gen.uniform({4}, -1, 1);
  auto expect_relu_of_conv = [&](const Tensor& x, const Tensor& kernel) {
    const Conv2DOptions same{.padding = Padding::same};
    const std::vector<float> got = conv2d_relu_forward(x, kernel, b, same).to_vector<float>();
    const std::vector<float> want =
        relu_forward(conv2d_forward(x, kernel, b, same)).to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    int special = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isnan(want[i])) {
        ++special;
        EXPECT_TRUE(std::isnan(got[i])) << "element " << i << ": " << got[i];
      } else {
        special += std::isinf(want[i]) ? 1 : 0;
        EXPECT_EQ(got[i], want[i]) << "element " << i;
      }
    }
    EXPECT_GT(special, 0) << "the case must produce NaN or infinite outputs";
  };
  for (float special :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    Tensor x = gen.uniform({2, 5, 5, 2}, -1, 1);
    x.data<float>()[17] = special;
    expect_relu_of_conv(x, k);
  }
  // Finite operands whose products overflow, to +inf and -inf in each window.
  Tensor big = Tensor::full({1, 3, 3, 2}, 1e20, DType::float32);
  Tensor mixed = Tensor::zeros({3, 3, 2, 4});
  for (int64_t i = 0; i < mixed.num_elements(); ++i) {
    mixed.data<float>()[i] = (i / 4) % 2 == 0 ? 1e20f : -1e20f;
  }
  expect_relu_of_conv(big, mixed);
}

TEST(Conv2DRelu, EmptyBatchGivesEmptyOutput) {
  Tensor x = Tensor::zeros({0, 7, 7, 5}), k = Tensor::ones({3, 3, 5, 6});
  EXPECT_EQ(conv2d_relu_forward(x, k, Tensor(), {.padding = Padding::same}).shape(),
            Shape({0, 7, 7, 6}));
}

TEST(Conv2D, WithoutBiasAddsNothing) {
  Generator gen(7);
  Tensor x = gen.uniform({3, 7, 7, 5}, -1, 1);
  Tensor k = gen.uniform({3, 3, 5, 6}, -1, 1);
  Tensor zero = Tensor::zeros({6});
  Conv2DOptions options{.strides = {2, 2}, .padding = Padding::same};
  EXPECT_EQ(conv2d_forward(x, k, Tensor(), options).to_vector<float>(),
            conv2d_forward(x, k, zero, options).to_vector<float>());
}

TEST(Conv2D, SamePaddingPutsTheOddPadElementAfter) {
  // One 4x4 image of ones with a 2x2 kernel of ones, stride 1, same: out is 4x4 and the padding
  // (one element in total) is on the bottom/right, so the last row and column see only part of
  // the window.
  Tensor x = Tensor::ones({1, 4, 4, 1});
  Tensor k = Tensor::ones({2, 2, 1, 1});
  Tensor y = conv2d_forward(x, k, Tensor(), {.padding = Padding::same});
  std::vector<float> v = y.to_vector<float>();
  EXPECT_FLOAT_EQ(v[0], 4);
  EXPECT_FLOAT_EQ(v[3], 2);
  EXPECT_FLOAT_EQ(v[15], 1);
}

TEST(Conv2D, EmptyBatchGivesEmptyOutputAndZeroKernelGradient) {
  for (DType dtype : {DType::float32, DType::bfloat16}) {
    Tensor x = Tensor::zeros({0, 7, 7, 5}, dtype), k = Tensor::ones({3, 3, 5, 6}, dtype);
    Tensor y = conv2d_forward(x, k, Tensor(), {.padding = Padding::same});
    EXPECT_EQ(y.shape(), Shape({0, 7, 7, 6}));
    EXPECT_EQ(conv2d_backward_input(y, k, x.shape(), {.padding = Padding::same}).shape(),
              x.shape());
    Tensor dk = conv2d_backward_kernel(y, x, k.shape(), {.padding = Padding::same});
    EXPECT_EQ(dk.to_vector<double>(), std::vector<double>(3 * 3 * 5 * 6, 0.0));
  }
}

TEST(Conv2D, RejectsWrongRankNamingBothShapes) {
  Tensor x({3, 7, 7}), k({3, 3, 5, 6});
  try {
    conv2d_forward(x, k);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("conv2d"), HasSubstr("float32[3, 7, 7]"),
                                HasSubstr("float32[3, 3, 5, 6]")));
  }
}

TEST(Conv2D, RejectsChannelMismatchNamingBothShapes) {
  Tensor x({3, 7, 7, 4}), k({3, 3, 5, 6});
  try {
    conv2d_forward(x, k);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("in_channels"), HasSubstr("float32[3, 7, 7, 4]"),
                                HasSubstr("float32[3, 3, 5, 6]")));
  }
}

TEST(Conv2D, RejectsValidWindowLargerThanInput) {
  Tensor x({1, 2, 7, 5}), k({3, 3, 5, 6});
  EXPECT_THROW(conv2d_forward(x, k), InvalidArgument);
  EXPECT_NO_THROW(conv2d_forward(x, k, Tensor(), {.padding = Padding::same}));
}

TEST(Conv2D, RejectsBiasOfWrongLengthAndMixedDtypes) {
  Tensor x = Tensor::zeros({1, 5, 5, 2}), k = Tensor::zeros({3, 3, 2, 4});
  try {
    conv2d_forward(x, k, Tensor::zeros({3}));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("float32[3]"), HasSubstr("float32[3, 3, 2, 4]")));
  }
  try {
    conv2d_forward(x, k.to(DType::bfloat16));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr("float32[1, 5, 5, 2]"), HasSubstr("bfloat16[3, 3, 2, 4]")));
  }
}

TEST(Conv2D, BackwardRejectsGradientOfWrongShape) {
  Tensor k = Tensor::zeros({3, 3, 5, 6});
  Tensor dy = Tensor::zeros({3, 7, 7, 6});  // the "same" output, but options say "valid"
  try {
    conv2d_backward_input(dy, k, {3, 7, 7, 5});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("[3, 5, 5, 6]"), HasSubstr("float32[3, 7, 7, 6]")));
  }
}

TEST(Padding, ParsesKerasNames) {
  EXPECT_EQ(padding_from_name("valid"), Padding::valid);
  EXPECT_EQ(padding_from_name("same"), Padding::same);
  EXPECT_THROW(padding_from_name("full"), InvalidArgument);
}

}  // namespace
}  // namespace lockstep::ops
