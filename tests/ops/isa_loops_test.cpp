// Lockstep's own ops loops are built for x86-64, x86-64-v3 and x86-64-v4 (core/cpu_dispatch.h) and
// chosen under the ISA cap; each must give the bits of its scalar definition, written here (this
// file compiles without FMA contraction). The isa label runs this file under every cap, so every
// build meets the same scalar bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "lockstep/core/bfloat16.h"
#include "lockstep/ops/activations.h"
#include "lockstep/ops/elementwise.h"

namespace lockstep {
namespace {

std::vector<float> values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  if (n > 4) {
    v[0] = -0.0f;
    v[1] = std::numeric_limits<float>::quiet_NaN();
    v[2] = -std::numeric_limits<float>::infinity();
    v[3] = std::numeric_limits<float>::denorm_min();
  }
  return v;
}

bool same_bits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

TEST(IsaLoops, ReluAndItsGradientGiveTheScalarBits) {
  for (size_t n : {size_t{7}, size_t{333}, size_t{4101}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const std::vector<float> x = values(n, 1), dy = values(n, 2);
    const int64_t len = static_cast<int64_t>(n);
    Tensor y = ops::relu_forward(Tensor::from_vector(x, {len}));
    Tensor dx = ops::relu_backward(Tensor::from_vector(dy, {len}), y);
    std::vector<float> want_y(n), want_dx(n);
    for (size_t i = 0; i < n; ++i) {
      want_y[i] = x[i] < 0.0f ? 0.0f : x[i];  // keeps NaN
      want_dx[i] = dy[i] * (want_y[i] > 0.0f ? 1.0f : 0.0f);
    }
    EXPECT_TRUE(same_bits(y.data<float>(), want_y.data(), n));
    EXPECT_TRUE(same_bits(dx.data<float>(), want_dx.data(), n));
  }
}

TEST(IsaLoops, AddGivesTheScalarBitsInFloat32AndBfloat16) {
  for (size_t n : {size_t{7}, size_t{333}, size_t{4101}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const std::vector<float> a = values(n, 3), b = values(n, 4);
    const int64_t len = static_cast<int64_t>(n);
    Tensor sum = ops::add_forward(Tensor::from_vector(a, {len}), Tensor::from_vector(b, {len}));
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
    EXPECT_TRUE(same_bits(sum.data<float>(), want.data(), n));

    std::vector<bfloat16> a16(n), b16(n);
    for (size_t i = 0; i < n; ++i) {
      a16[i] = bfloat16(a[i]);
      b16[i] = bfloat16(b[i]);
    }
    Tensor sum16 =
        ops::add_forward(Tensor::from_vector(a16, {len}), Tensor::from_vector(b16, {len}));
    for (size_t i = 0; i < n; ++i) {
      // bfloat16 operands widened exactly, added in float32, rounded once.
      const uint16_t want16 =
          bfloat16::round_from_float(static_cast<float>(a16[i]) + static_cast<float>(b16[i]));
      uint16_t got;
      std::memcpy(&got, sum16.data<bfloat16>() + i, sizeof got);
      ASSERT_EQ(got, want16) << "element " << i;
    }
  }
}

}  // namespace
}  // namespace lockstep
