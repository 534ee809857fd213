// ops::softmax_forward over a short last axis (a classifier's classes: float32, at most 32 of
// them), which runs each row in its own vector lane: against float64 with the error bound of its
// arithmetic, each row's bits independent of the rows computed beside it (a replica's batch of any
// size gives a row the same probabilities), and non-finite logits confined to their row.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "lockstep/core/random.h"
#include "lockstep/ops/softmax.h"

namespace lockstep {
namespace {

constexpr double kUnit = 0x1p-24;  // float32's unit roundoff

std::vector<float> softmax_rows(const std::vector<float>& x, int64_t rows, int64_t n) {
  return ops::softmax_forward(Tensor::from_vector(x, {rows, n}), -1).to_vector<float>();
}

// Each probability e_i / Σ e_k, e_i = exp(x_i − max): x_i − max rounds with relative error u,
// which exp turns into a relative error of at most u·|x_i − max|; the exponential's polynomial
// and scaling add at most 4u; the sum of n positive terms (n − 1)u; the reciprocal of the sum and
// the product u each. To first order, relative to the exact probability:
// u · (|x_i − max| + n + 5).
TEST(ShortAxisSoftmax, MatchesFloat64WithinTheBoundOfItsArithmetic) {
  Generator gen(11);
  for (int64_t n : {1, 2, 3, 10, 16, 17, 31, 32}) {
    for (int64_t rows : {1, 7, 16, 64, 65, 130}) {
      const std::vector<float> x = gen.uniform({rows, n}, -8, 8).to_vector<float>();
      const std::vector<float> p = softmax_rows(x, rows, n);
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x.data() + r * n;
        double m = xr[0];
        for (int64_t k = 1; k < n; ++k) m = std::max(m, double{xr[k]});
        double sum = 0;
        for (int64_t k = 0; k < n; ++k) sum += std::exp(double{xr[k]} - m);
        for (int64_t k = 0; k < n; ++k) {
          const double want = std::exp(double{xr[k]} - m) / sum;
          const double bound = kUnit * (std::fabs(xr[k] - m) + static_cast<double>(n) + 5) * want;
          ASSERT_LE(std::fabs(p[static_cast<size_t>(r * n + k)] - want), bound)
              << "row " << r << " of " << rows << ", class " << k << " of " << n;
        }
      }
    }
  }
}

// A replica's share of the global batch changes with the replica count; a row's probabilities must
// not (the property that N replicas train as one on the same global batch rests on it).
TEST(ShortAxisSoftmax, ARowsBitsDoNotDependOnTheRowsBesideIt) {
  const int64_t rows = 128, n = 10;
  const std::vector<float> x = Generator(12).uniform({rows, n}, -20, 20).to_vector<float>();
  const std::vector<float> whole = softmax_rows(x, rows, n);
  for (int64_t part : {1, 5, 37, 64}) {
    for (int64_t r0 = 0; r0 < rows; r0 += part) {
      const int64_t count = std::min(part, rows - r0);
      const std::vector<float> slice(x.begin() + r0 * n, x.begin() + (r0 + count) * n);
      const std::vector<float> p = softmax_rows(slice, count, n);
      ASSERT_EQ(std::memcmp(p.data(), whole.data() + r0 * n, p.size() * sizeof(float)), 0)
          << "rows " << r0 << ".." << r0 + count << " computed " << part << " at a time";
    }
  }
}

TEST(ShortAxisSoftmax, NonFiniteLogitsStayInTheirRow) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Rows: a NaN; +inf; a -inf beside finite logits; every logit -inf; finite.
  const std::vector<float> x = {0.5f, nan,  1.0f, 0.5f, inf,  1.0f, 0.5f, -inf,
                                1.0f, -inf, -inf, -inf, 0.5f, 0.0f, 1.0f};
  const std::vector<float> p = softmax_rows(x, 5, 3);
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(std::isnan(p[static_cast<size_t>(k)])) << "a NaN logit: class " << k;
    EXPECT_TRUE(std::isnan(p[static_cast<size_t>(3 + k)])) << "a +inf logit: class " << k;
    EXPECT_TRUE(std::isnan(p[static_cast<size_t>(9 + k)])) << "every logit -inf: class " << k;
  }
  // exp(-inf) is 0: the row is the softmax of its two finite logits.
  const double e0 = std::exp(0.5 - 1.0), s = e0 + 1.0;
  EXPECT_EQ(p[7], 0.0f);
  EXPECT_NEAR(p[6], e0 / s, 8 * kUnit);
  EXPECT_NEAR(p[8], 1.0 / s, 8 * kUnit);
  const std::vector<float> alone = softmax_rows({0.5f, 0.0f, 1.0f}, 1, 3);
  EXPECT_EQ(std::memcmp(p.data() + 12, alone.data(), 3 * sizeof(float)), 0)
      << "the finite row's probabilities changed beside non-finite rows";
}

}  // namespace
}  // namespace lockstep
