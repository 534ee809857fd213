// linear_backward with relu computes relu's gradient and the bias gradient in one pass. Checked on
// odd shapes (13 x 37, and 13 x 165: the pass runs over bands of whole vectors of columns, 16, 32
// or 64 wide by the loops' build, then column by column — every build meets both) with NaN, ±inf
// and ±0 mixed in, for float32 and for both bfloat16 paths: dbias against float64 sums of
// dy · [y > 0] written here, and bit for bit against the two-pass definition written here (dz
// first, then each column summed in float32, rows in order); dkernel and dx against float64
// products of that dz; and, with x the identity (dkernel = dz exactly), dz bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "lockstep/core/random.h"
#include "lockstep/ops/linear.h"
#include "testing/bf16_matmul_mode.h"

namespace lockstep {
namespace {

constexpr int64_t kRows = 13;
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

struct Operands {
  int64_t in, cols;
  Tensor x, kernel, y, dy;
};

// The columns that hold NaN or infinite dy (their dz and sums are NaN).
bool special_column(int64_t j) {
  return j < 3 || (j >= 70 && j < 73);
}

// y mixes positives, negatives, +0 and -0; dy is finite except for a NaN where y > 0, a NaN where
// y < 0 and an infinity where y <= 0 (inf · 0: NaN), in columns 0-2 and (when there are that many)
// 70-72, inside a band of every build; the others are clean. x is random [13, 5], or the identity.
Operands make(DType dtype, int64_t cols = 37, bool identity_x = false) {
  Generator gen(7);
  const int64_t in = identity_x ? kRows : 5;
  std::vector<float> x(kRows * in), k(in * cols), y(kRows * cols), dy(kRows * cols);
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t p = 0; p < in; ++p)
      x[i * in + p] = identity_x ? (i == p ? 1.0f : 0.0f) : gen.uniform() * 2 - 1;
  for (float& v : k) v = gen.uniform() * 2 - 1;
  for (size_t i = 0; i < y.size(); ++i) {
    const float u = gen.uniform();
    y[i] = u < 0.1f ? 0.0f : u < 0.2f ? -0.0f : u * 2 - 1;
    dy[i] = gen.uniform() * 2 - 1;
  }
  for (int64_t j0 : {int64_t{0}, int64_t{70}}) {
    if (j0 + 3 > cols) continue;
    const int64_t at = (j0 == 0 ? 0 : 5) * cols + j0;  // row 0, or row 5
    y[at] = 1.0f, dy[at] = kNaN;
    y[at + 1] = -1.0f, dy[at + 1] = kNaN;
    y[at + 2] = 0.0f, dy[at + 2] = kInf;
  }
  return {in,
          cols,
          Tensor::from_vector(x, {kRows, in}).to(dtype),
          Tensor::from_vector(k, {in, cols}).to(dtype),
          Tensor::from_vector(y, {kRows, cols}).to(dtype),
          Tensor::from_vector(dy, {kRows, cols}).to(dtype)};
}

// dz = dy · [y > 0] as floats (dy · 0 for y <= 0: a signed zero, or NaN for NaN and inf dy).
std::vector<float> relu_grad(const Operands& o) {
  const std::vector<float> y = o.y.to_vector<float>(), dy = o.dy.to_vector<float>();
  std::vector<float> dz(y.size());
  for (size_t i = 0; i < y.size(); ++i) dz[i] = dy[i] * (y[i] > 0.0f ? 1.0f : 0.0f);
  return dz;
}

void expect_same_float(float got, float want, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": " << got;
    return;
  }
  uint32_t a, b;
  std::memcpy(&a, &got, 4);
  std::memcpy(&b, &want, 4);
  EXPECT_EQ(a, b) << what << ": " << got << " vs " << want;
}

void check(DType dtype, int64_t cols = 37, bool identity_x = false) {
  const Operands o = make(dtype, cols, identity_x);
  const int64_t kIn = o.in, kCols = o.cols;
  ops::LinearGrads g = ops::linear_backward(o.dy, o.x, o.kernel, o.y, ops::FusedActivation::relu);
  const std::vector<float> dz = relu_grad(o);
  const std::vector<float> dbias = g.dbias.to_vector<float>();
  ASSERT_EQ(dbias.size(), static_cast<size_t>(kCols));
  for (int64_t j = 0; j < kCols; ++j) {
    float sum32 = 0.0f;  // the two-pass definition: rows in order, in float32
    double sum64 = 0.0;
    for (int64_t i = 0; i < kRows; ++i) {
      sum32 += dz[i * kCols + j];
      sum64 += static_cast<double>(dz[i * kCols + j]);
    }
    // bfloat16 biases hold the float32 sum rounded.
    const float want = dtype == DType::bfloat16 && g.dbias.dtype() == DType::bfloat16
                           ? static_cast<float>(bfloat16(sum32))
                           : sum32;
    expect_same_float(dbias[j], want, "dbias[" + std::to_string(j) + "]");
    if (!special_column(j)) {  // a bfloat16 result carries 8 bits
      const double rel = g.dbias.dtype() == DType::bfloat16 ? 4e-3 : 1e-5;
      EXPECT_NEAR(dbias[j], sum64, rel * (1 + std::abs(sum64))) << "column " << j;
    }
  }
  for (int64_t j = 0; j < kCols; ++j) {
    if (special_column(j)) {
      EXPECT_TRUE(std::isnan(dbias[j])) << "column " << j;
    }
  }

  // dkernel = xᵀ · dz and dx = dz · kernelᵀ on the clean columns / rows (float64 references).
  const std::vector<float> x = o.x.to_vector<float>(), k = o.kernel.to_vector<float>();
  const std::vector<float> dk = g.dkernel.to_vector<float>(), dx = g.dx.to_vector<float>();
  const double tol = dtype == DType::bfloat16 ? 3e-2 : 1e-5;
  for (int64_t p = 0; p < kIn; ++p) {
    for (int64_t j = 0; j < kCols; ++j) {
      if (special_column(j)) continue;
      double want = 0;
      for (int64_t i = 0; i < kRows; ++i) want += double{x[i * kIn + p]} * dz[i * kCols + j];
      EXPECT_NEAR(dk[p * kCols + j], want, tol * (1 + std::abs(want))) << p << "," << j;
    }
  }
  for (int64_t i = 1; i < kRows; ++i) {  // rows 0 and 5 hold the NaNs
    if (i == 5 && kCols > 72) continue;
    for (int64_t p = 0; p < kIn; ++p) {
      double want = 0;
      for (int64_t j = 0; j < kCols; ++j) want += double{dz[i * kCols + j]} * k[p * kCols + j];
      EXPECT_NEAR(dx[i * kIn + p], want, tol * (1 + std::abs(want))) << i << "," << p;
    }
  }
  // x the identity: dkernel[p, j] = dz[p, j] + a sum of zeros, so dz's own bits (a finite value
  // of dz times 0 is a zero; the special columns are NaN throughout).
  if (!identity_x) return;
  for (int64_t p = 0; p < kIn; ++p) {
    for (int64_t j = 0; j < kCols; ++j) {
      if (special_column(j)) continue;
      const float want = dz[p * kCols + j];
      expect_same_float(dk[p * kCols + j] == 0.0f ? 0.0f : dk[p * kCols + j],
                        want == 0.0f ? 0.0f : want,
                        "dz[" + std::to_string(p) + ", " + std::to_string(j) + "]");
    }
  }
}

TEST(LinearBackward, ReluAndBiasGradientsInOnePassFloat32) {
  check(DType::float32);
  check(DType::float32, 165, /*identity_x=*/true);
}

TEST(LinearBackward, ReluAndBiasGradientsInOnePassBfloat16Kernels) {
  testing::Bf16MatmulModeGuard mode(ops::Bf16MatmulMode::bfloat16_kernels);
  check(DType::bfloat16);
  check(DType::bfloat16, 165, /*identity_x=*/true);
}

TEST(LinearBackward, ReluAndBiasGradientsInOnePassBfloat16ComputedInFloat32) {
  testing::Bf16MatmulModeGuard mode(ops::Bf16MatmulMode::float32_compute);
  check(DType::bfloat16);
  check(DType::bfloat16, 165, /*identity_x=*/true);
}

// A bfloat16 layer's float32 bias gradient (mixed_bfloat16 with float32 variables): the sum is
// not rounded to bfloat16.
TEST(LinearBackward, Bfloat16OperandsWithAFloat32BiasGradientKeepTheFloat32Sum) {
  testing::Bf16MatmulModeGuard mode(ops::Bf16MatmulMode::bfloat16_kernels);
  const Operands o = make(DType::bfloat16, 165);
  const int64_t kIn = o.in, kCols = o.cols;
  Tensor dbias({kCols}, DType::float32), dkernel({kIn, kCols}, DType::float32);
  ops::linear_backward_into(o.dy, o.x, o.kernel, o.y, ops::FusedActivation::relu, Tensor(), dkernel,
                            dbias);
  const std::vector<float> dz = relu_grad(o), got = dbias.to_vector<float>();
  for (int64_t j = 0; j < kCols; ++j) {
    float sum32 = 0.0f;
    for (int64_t i = 0; i < kRows; ++i) sum32 += dz[i * kCols + j];
    expect_same_float(got[j], sum32, "dbias[" + std::to_string(j) + "]");
  }
}

}  // namespace
}  // namespace lockstep
