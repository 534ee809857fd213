// batch_norm and layer_norm against float64 loops written here from the definitions.
#include "lockstep/ops/nn_norm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/random.h"

namespace lockstep::ops {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

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

double tolerance(DType dtype) {
  return dtype == DType::float32 ? 1e-5 : dtype == DType::bfloat16 ? 1e-2 : 1e-12;
}

// Normalization of `x` viewed as [outer, inner] along `per_row` (layer norm) or per column
// (batch norm), with dy for the backward pass.
struct Reference {
  int64_t rows, cols;
  std::vector<double> x, gamma, beta, dy;
  double eps;

  double X(int64_t r, int64_t c) const { return x[static_cast<size_t>(r * cols + c)]; }
  double DY(int64_t r, int64_t c) const { return dy[static_cast<size_t>(r * cols + c)]; }

  // Batch norm, training: statistics over rows for each column.
  void batch(std::vector<double>& y, std::vector<double>& mean, std::vector<double>& var,
             std::vector<double>& dx, std::vector<double>& dgamma,
             std::vector<double>& dbeta) const {
    mean.assign(static_cast<size_t>(cols), 0);
    var.assign(static_cast<size_t>(cols), 0);
    for (int64_t c = 0; c < cols; ++c) {
      double s = 0;
      for (int64_t r = 0; r < rows; ++r) s += X(r, c);
      double m = s / rows, v = 0;
      for (int64_t r = 0; r < rows; ++r) v += (X(r, c) - m) * (X(r, c) - m);
      mean[static_cast<size_t>(c)] = m;
      var[static_cast<size_t>(c)] = v / rows;
    }
    y.assign(x.size(), 0);
    dx.assign(x.size(), 0);
    dgamma.assign(static_cast<size_t>(cols), 0);
    dbeta.assign(static_cast<size_t>(cols), 0);
    for (int64_t c = 0; c < cols; ++c) {
      size_t uc = static_cast<size_t>(c);
      double sd = std::sqrt(var[uc] + eps), sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t r = 0; r < rows; ++r) {
        double xhat = (X(r, c) - mean[uc]) / sd;
        y[static_cast<size_t>(r * cols + c)] = gamma[uc] * xhat + beta[uc];
        sum_dy += DY(r, c);
        sum_dy_xhat += DY(r, c) * xhat;
      }
      dgamma[uc] = sum_dy_xhat;
      dbeta[uc] = sum_dy;
      for (int64_t r = 0; r < rows; ++r) {
        double xhat = (X(r, c) - mean[uc]) / sd;
        dx[static_cast<size_t>(r * cols + c)] =
            gamma[uc] / sd * (DY(r, c) - sum_dy / rows - xhat * sum_dy_xhat / rows);
      }
    }
  }

  // Layer norm: statistics over columns for each row; dx from the full Jacobian
  // dxhat_j/dx_k = (δ_jk - 1/D - xhat_j xhat_k / D) / sd, a different route from the kernel's.
  void layer(std::vector<double>& y, std::vector<double>& dx, std::vector<double>& dgamma,
             std::vector<double>& dbeta) const {
    y.assign(x.size(), 0);
    dx.assign(x.size(), 0);
    dgamma.assign(static_cast<size_t>(cols), 0);
    dbeta.assign(static_cast<size_t>(cols), 0);
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0, v = 0;
      for (int64_t c = 0; c < cols; ++c) s += X(r, c);
      double m = s / cols;
      for (int64_t c = 0; c < cols; ++c) v += (X(r, c) - m) * (X(r, c) - m);
      double sd = std::sqrt(v / cols + eps);
      std::vector<double> xhat;
      for (int64_t c = 0; c < cols; ++c) xhat.push_back((X(r, c) - m) / sd);
      for (int64_t j = 0; j < cols; ++j) {
        size_t uj = static_cast<size_t>(j);
        y[static_cast<size_t>(r * cols + j)] = gamma[uj] * xhat[uj] + beta[uj];
        dgamma[uj] += DY(r, j) * xhat[uj];
        dbeta[uj] += DY(r, j);
        for (int64_t k = 0; k < cols; ++k) {
          size_t uk = static_cast<size_t>(k);
          double jac = ((j == k ? 1.0 : 0.0) - 1.0 / cols - xhat[uj] * xhat[uk] / cols) / sd;
          dx[static_cast<size_t>(r * cols + k)] += DY(r, j) * gamma[uj] * jac;
        }
      }
    }
  }
};

class NormMatchesReference : public ::testing::TestWithParam<DType> {
 protected:
  Tensor make(const Shape& s, double lo, double hi, std::vector<double>& values, DType dtype) {
    Tensor t = gen.uniform(s, lo, hi, DType::float64).to(dtype);
    values = t.to_vector<double>();
    return t;
  }
  Generator gen{21};
};

TEST_P(NormMatchesReference, BatchNormTrainingForwardBackwardAndStatistics) {
  DType dtype = GetParam();
  // float32 parameters for bfloat16 activations, as under mixed_bfloat16.
  DType param = dtype == DType::bfloat16 ? DType::float32 : dtype;
  Reference ref{3 * 7 * 7, 5, {}, {}, {}, {}, 1e-3};
  Tensor x = make({3, 7, 7, 5}, -1, 3, ref.x, dtype);
  Tensor gamma = make({5}, 0.5, 1.5, ref.gamma, param);
  Tensor beta = make({5}, -1, 1, ref.beta, param);
  Tensor dy = make({3, 7, 7, 5}, -1, 1, ref.dy, dtype);
  std::vector<double> y, mean, var, dx, dgamma, dbeta;
  ref.batch(y, mean, var, dx, dgamma, dbeta);

  BatchNormResult r = batch_norm_training(x, gamma, beta);
  EXPECT_EQ(r.output.dtype(), dtype);
  EXPECT_EQ(r.mean.dtype(), param);
  EXPECT_LT(relative_error(r.output, y), tolerance(dtype));
  EXPECT_LT(relative_error(r.mean, mean), tolerance(param));
  EXPECT_LT(relative_error(r.variance, var), tolerance(param));

  NormGrads g = batch_norm_training_backward(dy, x, gamma, r.mean, r.inv_std);
  EXPECT_LT(relative_error(g.x, dx), tolerance(dtype));
  EXPECT_LT(relative_error(g.gamma, dgamma), tolerance(dtype));
  EXPECT_LT(relative_error(g.beta, dbeta), tolerance(dtype));
}

TEST_P(NormMatchesReference, BatchNormInferenceUsesTheMovingStatistics) {
  DType dtype = GetParam();
  Reference ref{4 * 3, 7, {}, {}, {}, {}, 1e-3};
  std::vector<double> mm, mv;
  Tensor x = make({4, 3, 7}, -1, 1, ref.x, dtype);
  Tensor gamma = make({7}, 0.5, 1.5, ref.gamma, dtype);
  Tensor beta = make({7}, -1, 1, ref.beta, dtype);
  Tensor moving_mean = make({7}, -0.5, 0.5, mm, dtype);
  Tensor moving_var = make({7}, 0.5, 2, mv, dtype);
  Tensor dy = make({4, 3, 7}, -1, 1, ref.dy, dtype);
  std::vector<double> y, dx, dgamma(7, 0.0), dbeta(7, 0.0);
  for (int64_t r = 0; r < ref.rows; ++r)
    for (size_t c = 0; c < 7; ++c) {
      size_t i = static_cast<size_t>(r) * 7 + c;
      double sd = std::sqrt(mv[c] + 1e-3), xhat = (ref.x[i] - mm[c]) / sd;
      y.push_back(ref.gamma[c] * xhat + ref.beta[c]);
      dx.push_back(ref.dy[i] * ref.gamma[c] / sd);
      dgamma[c] += ref.dy[i] * xhat;
      dbeta[c] += ref.dy[i];
    }
  EXPECT_LT(
      relative_error(batch_norm_inference_forward(x, gamma, beta, moving_mean, moving_var), y),
      tolerance(dtype));
  NormGrads g = batch_norm_inference_backward(dy, x, gamma, moving_mean, moving_var);
  EXPECT_LT(relative_error(g.x, dx), tolerance(dtype));
  EXPECT_LT(relative_error(g.gamma, dgamma), tolerance(dtype));
  EXPECT_LT(relative_error(g.beta, dbeta), tolerance(dtype));
}

TEST_P(NormMatchesReference, LayerNormForwardAndBackward) {
  DType dtype = GetParam();
  Reference ref{3 * 5, 13, {}, {}, {}, {}, 1e-3};
  Tensor x = make({3, 5, 13}, -2, 2, ref.x, dtype);
  Tensor gamma = make({13}, 0.5, 1.5, ref.gamma, dtype);
  Tensor beta = make({13}, -1, 1, ref.beta, dtype);
  Tensor dy = make({3, 5, 13}, -1, 1, ref.dy, dtype);
  std::vector<double> y, dx, dgamma, dbeta;
  ref.layer(y, dx, dgamma, dbeta);

  LayerNormResult r = layer_norm_forward(x, gamma, beta);
  EXPECT_EQ(r.mean.shape(), Shape({3, 5}));
  EXPECT_LT(relative_error(r.output, y), tolerance(dtype));
  NormGrads g = layer_norm_backward(dy, x, gamma, r.mean, r.inv_std);
  EXPECT_LT(relative_error(g.x, dx), tolerance(dtype));
  EXPECT_LT(relative_error(g.gamma, dgamma), tolerance(dtype));
  EXPECT_LT(relative_error(g.beta, dbeta), tolerance(dtype));
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, NormMatchesReference,
                         ::testing::Values(DType::float32, DType::bfloat16, DType::float64));

TEST(BatchNorm, NormalizesEachChannelToZeroMeanAndUnitVarianceWithoutParameters) {
  Generator gen(1);
  Tensor x = gen.uniform({50, 3}, 10, 20, DType::float64);  // |mean| >> std
  BatchNormResult r = batch_norm_training(x, Tensor(), Tensor(), 0.0);
  std::vector<double> y = r.output.to_vector<double>();
  for (size_t c = 0; c < 3; ++c) {
    double s = 0, sq = 0;
    for (size_t m = 0; m < 50; ++m) s += y[m * 3 + c], sq += y[m * 3 + c] * y[m * 3 + c];
    EXPECT_NEAR(s / 50, 0.0, 1e-12);
    EXPECT_NEAR(sq / 50, 1.0, 1e-12);
  }
}

TEST(BatchNorm, RejectsGammaOfWrongShapeNamingBothShapes) {
  Tensor x = Tensor::zeros({3, 7, 7, 5});
  try {
    batch_norm_training(x, Tensor::ones({4}), Tensor());
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("batch_norm"), HasSubstr("float32[3, 7, 7, 5]"),
                                HasSubstr("gamma=float32[4]")));
  }
}

TEST(BatchNorm, RejectsParametersOfAnotherDtypeAndMissingMovingStatistics) {
  Tensor x = Tensor::zeros({2, 3});
  EXPECT_THROW(batch_norm_training(x, Tensor::ones({3}, DType::float64), Tensor()),
               InvalidArgument);
  EXPECT_THROW(batch_norm_inference_forward(x, Tensor(), Tensor(), Tensor(), Tensor::ones({3})),
               InvalidArgument);
}

TEST(LayerNorm, RejectsBetaOfWrongShapeAndGradientOfWrongShape) {
  Tensor x = Tensor::zeros({4, 6});
  try {
    layer_norm_forward(x, Tensor(), Tensor::zeros({4}));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("float32[4, 6]"), HasSubstr("beta=float32[4]")));
  }
  LayerNormResult r = layer_norm_forward(x, Tensor(), Tensor());
  try {
    layer_norm_backward(Tensor::zeros({6, 4}), x, Tensor(), r.mean, r.inv_std);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("float32[6, 4]"), HasSubstr("float32[4, 6]")));
  }
}

// mixed_bfloat16's float32 form (bfloat16_values): float32 arithmetic on bfloat16 values, the
// output rounded to bfloat16, dy read rounded. Against float64 loops on the same values, within
// bounds built step by step beside each quantity (u = 2^-24, gamma_k = k u / (1 - k u); a float
// sum of k terms is within gamma_(k-1) of the sum of their magnitudes, each further rounding adds
// u of its result), and bfloat16's 2^-8 for the stored output. The rows have a mean well away from
// zero, so x - mean cancels.
double gamma32(int64_t k) {
  const double ku = static_cast<double>(k) * std::ldexp(1.0, -24);
  return ku / (1 - ku);
}

TEST(LayerNormOfBfloat16Values, ForwardAndBackwardStayWithinTheDerivedBounds) {
  constexpr int64_t kRows = 29, kN = 67;
  constexpr double kEps = 1e-3, u = 0x1p-24, kBf16 = 0x1p-8;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> dist(3.0f, 2.0f);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> x(kRows * kN), gamma(kN), beta(kN), dy(kRows * kN);
  for (float& v : x) v = round_to_bfloat16_value(dist(rng));
  for (float& v : gamma) v = round_to_bfloat16_value(1.0f + 0.5f * uni(rng));
  for (float& v : beta) v = round_to_bfloat16_value(uni(rng));
  for (float& v : dy) v = uni(rng);  // read rounded by the op
  const Tensor tx = Tensor::from_vector(x, {kRows, kN}), tg = Tensor::from_vector(gamma, {kN}),
               tb = Tensor::from_vector(beta, {kN}), tdy = Tensor::from_vector(dy, {kRows, kN});
  const LayerNormResult r = layer_norm_forward(tx, tg, tb, kEps, true);
  EXPECT_TRUE(r.output.holds_bfloat16_values());
  const NormGrads g = layer_norm_backward(tdy, tx, tg, r.mean, r.inv_std, true);

  std::vector<double> dgamma(kN, 0.0), dbeta(kN, 0.0), e_dgamma(kN, 0.0), abs_dbeta(kN, 0.0);
  for (int64_t row = 0; row < kRows; ++row) {
    const float* xr = x.data() + row * kN;
    double sum = 0, abs_sum = 0;
    for (int64_t d = 0; d < kN; ++d) sum += xr[d], abs_sum += std::fabs(xr[d]);
    const double mu = sum / kN;
    // mean: a float sum of n terms, then a division.
    const double e_mu = gamma32(kN + 1) * abs_sum / kN;
    std::vector<double> c(kN), e_c(kN);
    double var = 0, e_squares = 0, squares_mag = 0;
    for (int64_t d = 0; d < kN; ++d) {
      c[d] = xr[d] - mu;
      e_c[d] = e_mu + u * (std::fabs(c[d]) + e_mu);  // x - mean: the mean's error, one rounding
      var += c[d] * c[d];
      e_squares += e_c[d] * (2 * std::fabs(c[d]) + e_c[d]);
      squares_mag += (std::fabs(c[d]) + e_c[d]) * (std::fabs(c[d]) + e_c[d]);
    }
    var /= kN;
    // variance: the squares' carried error, then n roundings of squares, a sum and a division.
    const double e_var = (e_squares + gamma32(kN + 1) * squares_mag) / kN;
    const double w = var + kEps, e_w = e_var + u * (w + e_var);
    const double s = 1 / std::sqrt(w);
    // 1 / sqrt(w (1 + rho)) is within |rho| <= e_w / w (< 1/2) of 1 / sqrt(w); the square root and
    // the division round once each.
    const double rel_s = (1 + e_w / w) * (1 + u) * (1 + u) * (1 + u) - 1;
    EXPECT_LE(std::fabs(r.mean.data<float>()[row] - mu), e_mu) << row;
    EXPECT_LE(std::fabs(r.inv_std.data<float>()[row] - s), rel_s * s) << row;

    std::vector<double> xhat(kN), e_xh(kN), dyr(kN), dg(kN);
    double sum_g = 0, sum_gx = 0, abs_g = 0, e_sum_gx = 0, abs_gx = 0;
    for (int64_t d = 0; d < kN; ++d) {
      xhat[d] = c[d] * s;
      // (x - mean) · inv_std: both operands' errors and one rounding.
      e_xh[d] = s * (e_c[d] + (std::fabs(c[d]) + e_c[d]) * ((1 + rel_s) * (1 + u) - 1));
      const double y = xhat[d] * gamma[d] + beta[d];
      // · gamma + beta: the carried error and two roundings.
      const double e_f =
          std::fabs(gamma[d]) * e_xh[d] +
          2 * u * (1 + u) *
              (std::fabs(gamma[d]) * (std::fabs(xhat[d]) + e_xh[d]) + std::fabs(beta[d]));
      // bound: the float32 result's error plus its bfloat16 rounding, 2^-8 of its magnitude.
      const float got = r.output.data<float>()[row * kN + d];
      EXPECT_LE(std::fabs(got - y), e_f + kBf16 * (std::fabs(y) + e_f))
          << "y[" << row << "][" << d << "]";
      EXPECT_EQ(round_to_bfloat16_value(got), got) << "y[" << row << "][" << d << "]";

      dyr[d] = round_to_bfloat16_value(dy[row * kN + d]);
      dg[d] = dyr[d] * gamma[d];
      sum_g += dg[d];
      abs_g += std::fabs(dg[d]);
      sum_gx += dg[d] * xhat[d];
      // dy·gamma (one rounding) times xhat (carried error, one rounding).
      const double e_dgx =
          std::fabs(dg[d]) * e_xh[d] + 3 * u * std::fabs(dg[d]) * (std::fabs(xhat[d]) + e_xh[d]);
      e_sum_gx += e_dgx;
      abs_gx += std::fabs(dg[d] * xhat[d]) + e_dgx;
      dgamma[d] += dyr[d] * xhat[d];
      dbeta[d] += dyr[d];
      // a float product carried into a double sum, then one float rounding of the total.
      e_dgamma[d] +=
          std::fabs(dyr[d]) * e_xh[d] + 3 * u * std::fabs(dyr[d]) * (std::fabs(xhat[d]) + e_xh[d]);
      abs_dbeta[d] += std::fabs(dyr[d]);
    }
    const double mean_g = sum_g / kN, mean_gx = sum_gx / kN;
    // the means: the terms' errors, then a float sum of n terms and a division.
    const double e_mg = (u + gamma32(kN + 1) * (1 + u)) * abs_g / kN;
    const double e_mgx = (e_sum_gx + gamma32(kN + 1) * abs_gx) / kN;
    for (int64_t d = 0; d < kN; ++d) {
      const double term = dg[d] - mean_g - xhat[d] * mean_gx;
      const double carried = u * std::fabs(dg[d]) + e_mg + e_xh[d] * (std::fabs(mean_gx) + e_mgx) +
                             std::fabs(xhat[d]) * e_mgx;
      const double magnitude = std::fabs(dg[d]) + std::fabs(mean_g) + e_mg +
                               (std::fabs(xhat[d]) + e_xh[d]) * (std::fabs(mean_gx) + e_mgx);
      // dy·gamma - mean_g - xhat·mean_gx: the carried errors and three roundings.
      const double e_term = carried + 3 * u * (1 + u) * magnitude;
      // bound: inv_std's error and one more rounding on top.
      const double e_dx = s * (e_term + (std::fabs(term) + e_term) * ((1 + rel_s) * (1 + u) - 1));
      EXPECT_LE(std::fabs(g.x.data<float>()[row * kN + d] - s * term), e_dx)
          << "dx[" << row << "][" << d << "]";
    }
  }
  for (int64_t d = 0; d < kN; ++d) {
    EXPECT_LE(std::fabs(g.gamma.data<float>()[d] - dgamma[d]), e_dgamma[d]) << "dgamma " << d;
    // bound: bfloat16 values summed in double, then one float rounding.
    EXPECT_LE(std::fabs(g.beta.data<float>()[d] - dbeta[d]), 2 * u * abs_dbeta[d]) << "dbeta " << d;
  }
}

}  // namespace
}  // namespace lockstep::ops
