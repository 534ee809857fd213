// The mixed_bfloat16 fast path on machines without AMX: the vectorised bulk conversions, the
// one-pass round_to_bfloat16 and the linear op taking a bfloat16 x with a float32 kernel that holds
// bfloat16 values. Each is checked against an independent reference: the scalar
// bfloat16::round_from_float / operator float, the cast pair, and the all-bfloat16 linear.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/bf16_matmul_mode.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "lockstep/core/bfloat16.h"
#include "lockstep/ops/activations.h"
#include "lockstep/ops/bfloat16_values.h"
#include "lockstep/ops/elementwise.h"
#include "lockstep/ops/linear.h"
#include "lockstep/ops/matmul.h"
#include "lockstep/ops/shape_ops.h"

namespace lockstep {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Random bit patterns (every class: normals, subnormals, +-0, inf, NaN payloads) plus the edges:
// exact ties (low 16 bits 0x8000) with even and odd kept bits, one ulp either side of a tie, the
// largest finite values (rounding up to infinity), signalling and quiet NaNs.
std::vector<float> edge_and_random_values(size_t n_random) {
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7fffffffu,
                                0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0xbf808000u,
                                0xbf818000u, 0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, 0x7f7f7fffu,
                                0x00000001u, 0x80000001u, 0x00008000u, 0x00018000u, 0x007fffffu,
                                0x00800000u, 0x3f800000u, 0x40490fdbu, 0xc0490fdbu};
  std::mt19937 rng(7);
  for (size_t i = 0; i < n_random; ++i) bits.push_back(static_cast<uint32_t>(rng()));
  std::vector<float> v;
  for (uint32_t b : bits) v.push_back(from_bits(b));
  return v;
}

TEST(Bfloat16Bulk, FloatToBfloat16MatchesTheScalarRoundingBitForBit) {
  std::vector<float> src = edge_and_random_values(100000);
  std::vector<bfloat16> dst(src.size());
  float_to_bfloat16(src.data(), dst.data(), src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(dst[i].bits, bfloat16::round_from_float(src[i]))
        << "bits 0x" << std::hex << to_bits(src[i]);
  }
}

TEST(Bfloat16Bulk, Bfloat16ToFloatIsTheTopSixteenBits) {
  std::vector<bfloat16> src;
  for (uint32_t b = 0; b < 0x10000u; ++b)
    src.push_back(bfloat16::from_bits(static_cast<uint16_t>(b)));
  std::vector<float> dst(src.size());
  bfloat16_to_float(src.data(), dst.data(), src.size());
  for (uint32_t b = 0; b < 0x10000u; ++b) ASSERT_EQ(to_bits(dst[b]), b << 16) << b;
}

TEST(Bfloat16Bulk, OddLengthsAndTailsAreConverted) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{17}, size_t{33}}) {
    std::vector<float> src = edge_and_random_values(n);
    src.resize(n);
    std::vector<float> dst(n + 1, 123.0f);
    round_to_bfloat16_values(src.data(), dst.data(), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(to_bits(dst[i]), static_cast<uint32_t>(bfloat16::round_from_float(src[i])) << 16);
    }
    EXPECT_EQ(dst[n], 123.0f);  // nothing written past the end
  }
}

TEST(RoundToBfloat16, EqualsCastToBfloat16ThenWidenBitForBit) {
  std::vector<float> v = edge_and_random_values(50000);
  Tensor x = Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())});
  Tensor one_pass = ops::round_to_bfloat16_forward(x);
  Tensor two_casts = ops::cast_forward(ops::cast_forward(x, DType::bfloat16), DType::float32);
  ASSERT_EQ(one_pass.dtype(), DType::float32);
  const float* a = one_pass.data<float>();
  const float* b = two_casts.data<float>();
  for (size_t i = 0; i < v.size(); ++i) {
    // Every value, subnormals included: the scalar definition (bfloat16's constructor).
    ASSERT_EQ(to_bits(a[i]), static_cast<uint32_t>(bfloat16::round_from_float(v[i])) << 16)
        << "bits 0x" << std::hex << to_bits(v[i]);
    // oneDNN's float32 -> bfloat16 reorder (ops::cast_forward) flushes float32 subnormals to zero;
    // the one-pass rounding keeps them (bfloat16 has float32's subnormal range). Elsewhere the two
    // agree bit for bit.
    if (std::fpclassify(v[i]) == FP_SUBNORMAL) continue;
    // The cast pair may quiet a NaN differently (oneDNN's reorder); both must stay NaN.
    if (std::isnan(v[i])) {
      ASSERT_TRUE(std::isnan(a[i]) && std::isnan(b[i])) << i;
      continue;
    }
    ASSERT_EQ(to_bits(a[i]), to_bits(b[i])) << "bits 0x" << std::hex << to_bits(v[i]);
  }
}

TEST(RoundToBfloat16, RejectsOtherDtypes) {
  EXPECT_THROW(ops::round_to_bfloat16_forward(Tensor({3}, DType::bfloat16)), InvalidArgument);
  EXPECT_THROW(ops::round_to_bfloat16_forward(Tensor({3}, DType::float64)), InvalidArgument);
}

TEST(ReluBfloat16, FusedLinearReluOnBitsMatchesTheFloatComparison) {
  // Every bfloat16 bit pattern as a column, times a 1x1 kernel of 1: linear's bfloat16 relu loop
  // sees every class (+-0, subnormals, inf, NaNs); the reference is the float comparison applied
  // to the same linear without activation.
  Tensor x({0x10000, 1}, DType::bfloat16);
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    x.data<bfloat16>()[b] = bfloat16::from_bits(static_cast<uint16_t>(b));
  }
  Tensor k = ops::cast_forward(Tensor::from_vector<float>({1.0f}, {1, 1}), DType::bfloat16);
  Tensor z = ops::linear_forward(x, k, Tensor(), ops::FusedActivation::none);
  Tensor y = ops::linear_forward(x, k, Tensor(), ops::FusedActivation::relu);
  const bfloat16* pz = z.data<bfloat16>();
  const bfloat16* py = y.data<bfloat16>();
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    float v = static_cast<float>(pz[b]);
    if (std::isnan(v)) {
      ASSERT_TRUE(std::isnan(static_cast<float>(py[b]))) << b;
    } else {
      ASSERT_EQ(py[b].bits, v < 0.0f ? uint16_t{0} : pz[b].bits) << b;
    }
  }
}

// relu's bfloat16 gradient (the bit-level loop behind relu_backward and linear_backward) against
// the float arithmetic it replaces, bfloat16(float(dy) * (float(y) > 0 ? 1 : 0)), for every dy bit
// pattern against saved values of every class.
TEST(ReluBfloat16, GradientOnBitsMatchesTheFloatArithmetic) {
  const std::vector<uint16_t> saved_bits = {0x0000, 0x8000, 0x0001, 0x8001, 0x3f80, 0xbf80, 0x7f7f,
                                            0xff7f, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0xff81};
  const int64_t n = 0x10000;
  for (uint16_t sb : saved_bits) {
    Tensor dy({n}, DType::bfloat16), y({n}, DType::bfloat16);
    for (int64_t i = 0; i < n; ++i) {
      dy.data<bfloat16>()[i] = bfloat16::from_bits(static_cast<uint16_t>(i));
      y.data<bfloat16>()[i] = bfloat16::from_bits(sb);
    }
    Tensor dx = ops::relu_backward(dy, y);
    const volatile float one = 1.0f, zero = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float d = static_cast<float>(dy.data<bfloat16>()[i]);
      const float s = static_cast<float>(y.data<bfloat16>()[i]);
      const float want = d * (s > 0.0f ? one : zero);
      ASSERT_EQ(dx.data<bfloat16>()[i].bits, bfloat16::round_from_float(want))
          << "dy 0x" << std::hex << i << " y 0x" << sb;
    }
  }
}

Tensor random_f32(const Shape& s, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  Tensor t(s, DType::float32);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

void expect_bits_equal(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  Tensor a32 = ops::cast_forward(a, DType::float32), b32 = ops::cast_forward(b, DType::float32);
  ASSERT_EQ(std::memcmp(a32.data<float>(), b32.data<float>(), a32.num_elements() * sizeof(float)),
            0);
}

// bfloat16 x with a float32 kernel of bfloat16 values (and a float32 bias of bfloat16 values) must
// give exactly what the all-bfloat16 linear gives when bfloat16 matmuls compute in float32; the
// kernel and bias gradients come out float32 and equal the float32 products before rounding.
TEST(MixedLinear, MatchesTheAllBfloat16LinearWhenComputingInFloat32) {
  testing::Bf16MatmulModeGuard mode(ops::Bf16MatmulMode::float32_compute);
  Tensor x = ops::cast_forward(random_f32({37, 50}, 1), DType::bfloat16);
  Tensor k32 = ops::round_to_bfloat16_forward(random_f32({50, 23}, 2));
  Tensor b32 = ops::round_to_bfloat16_forward(random_f32({23}, 3));
  Tensor k16 = ops::cast_forward(k32, DType::bfloat16),
         b16 = ops::cast_forward(b32, DType::bfloat16);
  for (ops::FusedActivation act :
       {ops::FusedActivation::none, ops::FusedActivation::relu, ops::FusedActivation::tanh}) {
    Tensor y_mixed = ops::linear_forward(x, k32, b32, act);
    Tensor y_ref = ops::linear_forward(x, k16, b16, act);
    ASSERT_EQ(y_mixed.dtype(), DType::bfloat16);
    expect_bits_equal(y_mixed, y_ref);

    Tensor dy = ops::cast_forward(random_f32({37, 23}, 4), DType::bfloat16);
    ops::LinearGrads gm = ops::linear_backward(dy, x, k32, y_mixed, act, true, true, true);
    ops::LinearGrads gr = ops::linear_backward(dy, x, k16, y_ref, act, true, true, true);
    ASSERT_EQ(gm.dx.dtype(), DType::bfloat16);
    ASSERT_EQ(gm.dkernel.dtype(), DType::float32);
    ASSERT_EQ(gm.dbias.dtype(), DType::float32);
    expect_bits_equal(gm.dx, gr.dx);
    // The all-bfloat16 path rounds dkernel / dbias to bfloat16; the mixed one keeps float32.
    expect_bits_equal(ops::cast_forward(gm.dkernel, DType::bfloat16), gr.dkernel);
    expect_bits_equal(ops::cast_forward(gm.dbias, DType::bfloat16), gr.dbias);
    // dkernel = float32(x)ᵀ · float32(dz), the float32 matmul of the widened operands.
    Tensor dz = act == ops::FusedActivation::none ? dy : Tensor();
    if (dz.defined()) {
      Tensor want = ops::matmul_forward(ops::cast_forward(x, DType::float32),
                                        ops::cast_forward(dz, DType::float32), true, false);
      expect_bits_equal(gm.dkernel, want);
    }
  }
}

// The relu backward of the mixed path widens relu's gradient in one pass: its dkernel must be the
// float32 matmul of widen(x) and widen(relu_backward(dy, y)) (relu_backward is checked above
// against the float arithmetic), and its dx that product with the kernel, rounded.
TEST(MixedLinear, ReluBackwardEqualsWidenedReluGradientThenFloat32Matmuls) {
  Tensor x = ops::cast_forward(random_f32({29, 40}, 5), DType::bfloat16);
  Tensor k32 = ops::round_to_bfloat16_forward(random_f32({40, 31}, 6));
  Tensor y = ops::linear_forward(x, k32, Tensor(), ops::FusedActivation::relu);
  Tensor dy32 = random_f32({29, 31}, 7);
  dy32.data<float>()[0] = 0.0f;
  dy32.data<float>()[1] = -0.0f;
  Tensor dy = ops::cast_forward(dy32, DType::bfloat16);
  ops::LinearGrads g =
      ops::linear_backward(dy, x, k32, y, ops::FusedActivation::relu, true, true, true);
  Tensor dz32 = ops::cast_forward(ops::relu_backward(dy, y), DType::float32);
  Tensor x32 = ops::cast_forward(x, DType::float32);
  expect_bits_equal(g.dkernel, ops::matmul_forward(x32, dz32, true, false));
  expect_bits_equal(
      g.dx, ops::cast_forward(ops::matmul_forward(dz32, k32, false, true), DType::bfloat16));
}

TEST(MixedLinear, OtherDtypeMixesAreStillRejected) {
  Tensor x32 = random_f32({4, 3}, 1),
         k16 = ops::cast_forward(random_f32({3, 2}, 2), DType::bfloat16);
  EXPECT_THROW(ops::linear_forward(x32, k16, Tensor()), InvalidArgument);
  Tensor x64 = ops::cast_forward(x32, DType::float64);
  EXPECT_THROW(ops::linear_forward(x64, random_f32({3, 2}, 2), Tensor()), InvalidArgument);
}

// mixed_bfloat16's float32 form (ops/bfloat16_values.h) against the scalar definition: every
// output element is bfloat16::round_from_float of its input, widened; relu compares the rounded
// value with 0 as floats; its gradient is the rounded dy times 1 or 0 as floats.
TEST(Bfloat16Values, RoundingAndItsGradientAreTheScalarRoundingBitForBit) {
  std::vector<float> v = edge_and_random_values(50000);
  const Shape shape{static_cast<int64_t>(v.size())};
  Tensor x = Tensor::from_vector<float>(v, shape);
  Tensor also_x = x;  // a second handle: x must not change
  Tensor y = ops::to_bfloat16_values_forward(x, /*reuse_sole_handle=*/true);
  // A caller's tensor (reuse not asked for) is never rewritten, sole handle or not.
  Tensor callers = Tensor::from_vector<float>(v, shape);
  Tensor from_callers = ops::to_bfloat16_values_forward(callers);
  EXPECT_FALSE(from_callers.shares_storage_with(callers));
  Tensor dx = ops::to_bfloat16_values_backward(x);
  EXPECT_TRUE(y.holds_bfloat16_values());
  EXPECT_FALSE(x.holds_bfloat16_values());
  // Marked too: a second rounding of it is free, and accumulating into it clears the mark.
  EXPECT_TRUE(dx.holds_bfloat16_values());
  EXPECT_FALSE(y.shares_storage_with(x) || dx.shares_storage_with(x));
  // A sole handle is rounded where it is: the result is a new handle on the same memory.
  Tensor sole = Tensor::from_vector<float>(v, shape);
  const void* memory = sole.raw_data();
  Tensor y_in_place = ops::to_bfloat16_values_forward(sole, /*reuse_sole_handle=*/true);
  EXPECT_EQ(y_in_place.raw_data(), memory);
  EXPECT_NE(y_in_place.id(), sole.id());
  EXPECT_TRUE(y_in_place.holds_bfloat16_values());
  Tensor sole_dy = Tensor::from_vector<float>(v, shape);
  const void* dy_memory = sole_dy.raw_data();
  Tensor dx_in_place = ops::to_bfloat16_values_backward(sole_dy);
  EXPECT_EQ(dx_in_place.raw_data(), dy_memory);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t want = static_cast<uint32_t>(bfloat16::round_from_float(v[i])) << 16;
    ASSERT_EQ(to_bits(x.data<float>()[i]), to_bits(v[i])) << i;
    ASSERT_EQ(to_bits(callers.data<float>()[i]), to_bits(v[i])) << i;
    ASSERT_EQ(to_bits(from_callers.data<float>()[i]), want) << i;
    ASSERT_EQ(to_bits(y.data<float>()[i]), want) << "bits 0x" << std::hex << to_bits(v[i]);
    ASSERT_EQ(to_bits(dx.data<float>()[i]), want) << "bits 0x" << std::hex << to_bits(v[i]);
    ASSERT_EQ(to_bits(y_in_place.data<float>()[i]), want) << i;
    ASSERT_EQ(to_bits(dx_in_place.data<float>()[i]), want) << i;
  }
}

TEST(Bfloat16Values, ReluOfTheRoundedValueKeepsNaNAndItsGradientMasksTheRoundedDy) {
  std::vector<float> v = edge_and_random_values(50000);
  const auto n = static_cast<int64_t>(v.size());
  Tensor x = Tensor::from_vector<float>(v, {n});
  Tensor y = ops::relu_to_bfloat16_values_forward(x);
  EXPECT_TRUE(y.holds_bfloat16_values());
  std::vector<float> d(v.rbegin(), v.rend());  // dy: the same classes against other y
  Tensor dy = Tensor::from_vector<float>(d, {n});
  Tensor also_dy = dy;  // a second handle: a new dx
  Tensor dx = ops::relu_to_bfloat16_values_backward(dy, y);
  EXPECT_TRUE(dx.holds_bfloat16_values());
  EXPECT_FALSE(dx.shares_storage_with(dy));
  also_dy = Tensor();  // now the sole handle: dx is written over dy
  Tensor dx_in_place = ops::relu_to_bfloat16_values_backward(dy, y);
  EXPECT_TRUE(dx_in_place.shares_storage_with(dy));
  const volatile float one = 1.0f, zero = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float r = static_cast<float>(bfloat16::from_bits(bfloat16::round_from_float(v[i])));
    const float yi = y.data<float>()[i];
    if (std::isnan(r)) {
      ASSERT_TRUE(std::isnan(yi)) << i;
    } else {
      ASSERT_EQ(to_bits(yi), to_bits(r < 0.0f ? 0.0f : r))
          << "bits 0x" << std::hex << to_bits(v[i]);
    }
    const float rd = static_cast<float>(bfloat16::from_bits(bfloat16::round_from_float(d[i])));
    const float want = rd * (yi > 0.0f ? one : zero);
    for (const Tensor* out : {&dx, &dx_in_place}) {
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(out->data<float>()[i])) << i;
      } else {
        ASSERT_EQ(to_bits(out->data<float>()[i]), to_bits(want)) << i;
      }
    }
  }
}

TEST(Bfloat16Values, TheMarkFollowsTheMemoryAndACopyIntoItClearsIt) {
  Tensor y = ops::to_bfloat16_values_forward(random_f32({4, 6}, 3));
  EXPECT_TRUE(y.reshape({6, 4}).holds_bfloat16_values());  // views share the block
  EXPECT_TRUE(y.slice(1, 3).holds_bfloat16_values());
  EXPECT_FALSE(y.clone().holds_bfloat16_values());  // a new block starts unmarked
  y.slice(0, 2).copy_from(random_f32({2, 6}, 4));
  EXPECT_FALSE(y.holds_bfloat16_values());
  EXPECT_THROW(Tensor({2}, DType::bfloat16).mark_bfloat16_values(), InvalidArgument);
}

TEST(Bfloat16Values, AMarkedGradientPassesTheRoundingAsItIsAndAnAddIntoItClearsTheMark) {
  // A gradient its producer already stored rounded (and marked) is not rounded again.
  const Tensor dy = ops::to_bfloat16_values_forward(random_f32({3, 5}, 5));
  const Tensor passed = ops::to_bfloat16_values_backward(dy);
  EXPECT_TRUE(passed.shares_storage_with(dy));
  // An unmarked one is: another value means another tensor or another content.
  const Tensor raw = random_f32({3, 5}, 6), copy = raw.clone();
  const Tensor rounded = ops::to_bfloat16_values_backward(raw);
  for (int64_t i = 0; i < 15; ++i) {
    EXPECT_EQ(rounded.data<float>()[i], round_to_bfloat16_value(copy.data<float>()[i])) << i;
  }
  // A sum of bfloat16 values need not be one: accumulating into a marked tensor clears its mark.
  const Tensor acc = ops::to_bfloat16_values_forward(random_f32({3, 5}, 7));
  ops::add_into(acc, random_f32({3, 5}, 8));
  EXPECT_FALSE(acc.holds_bfloat16_values());
}

TEST(Bfloat16Values, AddOfMismatchedShapesOrDtypesIsRejectedNamingThem) {
  try {
    ops::add_to_bfloat16_values_forward(Tensor({2, 3}, DType::float32),
                                        Tensor({3, 2}, DType::float32));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("[2, 3]"));
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("[3, 2]"));
  }
  EXPECT_THROW(ops::add_to_bfloat16_values_forward(Tensor({2}, DType::float32),
                                                   Tensor({2}, DType::bfloat16)),
               InvalidArgument);
}

TEST(Bfloat16Values, OtherDtypesAndMismatchedShapesAreRejectedNamingThem) {
  try {
    ops::to_bfloat16_values_forward(Tensor({3}, DType::bfloat16));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("bfloat16[3]"));
  }
  EXPECT_THROW(ops::relu_to_bfloat16_values_forward(Tensor({3}, DType::float64)), InvalidArgument);
  try {
    ops::relu_to_bfloat16_values_backward(Tensor({3}, DType::float32), Tensor({4}, DType::float32));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("[3]"));
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("[4]"));
  }
}

// linear_to_bfloat16_values rounds its output a block of rows at a time as the matmul writes it,
// and linear_gelu_to_bfloat16_values applies gelu and the rounding the same way: the bits of the
// plain ops followed by the scalar rounding, marked. Shapes whose rows split into
// blocks (unevenly), and ones too small.
TEST(Bfloat16Values, LinearRoundingAsTheMatmulWritesIsTheRoundingAfterIt) {
  struct Case {
    int64_t m, k, n;
    bool bias;
  };
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  auto random = [&](const Shape& shape) {
    std::vector<float> v(static_cast<size_t>(shape.num_elements()));
    for (float& e : v) e = dist(rng);
    return Tensor::from_vector(v, shape);
  };
  auto rounded = [](const Tensor& t) {
    std::vector<float> v = t.to_vector<float>();
    for (float& e : v) e = round_to_bfloat16_value(e);
    return v;
  };
  auto same_bits = [](const Tensor& t, const std::vector<float>& want) {
    return t.num_elements() == static_cast<int64_t>(want.size()) &&
           std::memcmp(t.data<float>(), want.data(), want.size() * sizeof(float)) == 0;
  };
  for (const Case& c : {Case{2100, 64, 64, true}, Case{1030, 40, 192, false},
                        Case{300, 37, 5, true}, Case{3, 8, 2, false}}) {
    SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.k) + "x" + std::to_string(c.n));
    const Tensor x = random({c.m, c.k}), w = random({c.k, c.n});
    const Tensor b = c.bias ? random({c.n}) : Tensor();
    const Tensor y = ops::linear_to_bfloat16_values_forward(x, w, b);
    const Tensor z = ops::linear_forward(x, w, b);
    EXPECT_TRUE(same_bits(y, rounded(z)));
    EXPECT_TRUE(y.holds_bfloat16_values());
    // With gelu: z as linear_forward computes it, y the rounding of gelu_forward(z).
    const ops::LinearGeluResult g = ops::linear_gelu_to_bfloat16_values_forward(x, w, b);
    EXPECT_TRUE(same_bits(g.z, z.to_vector<float>()));
    EXPECT_TRUE(same_bits(g.y, rounded(ops::gelu_forward(z))));
    EXPECT_TRUE(g.y.holds_bfloat16_values());
  }
  try {
    ops::linear_to_bfloat16_values_forward(Tensor({4, 3}, DType::bfloat16),
                                           Tensor({3, 2}, DType::float32), Tensor());
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("linear_to_bfloat16_values"));
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("bfloat16[4, 3]"));
  }
  EXPECT_THROW(ops::linear_to_bfloat16_values_forward(Tensor({4, 3}, DType::float32),
                                                      Tensor({5, 2}, DType::float32), Tensor()),
               InvalidArgument);
  EXPECT_THROW(ops::linear_gelu_to_bfloat16_values_forward(
                   Tensor({4, 3}, DType::float64), Tensor({3, 2}, DType::float64), Tensor()),
               InvalidArgument);
}

}  // namespace
}  // namespace lockstep
