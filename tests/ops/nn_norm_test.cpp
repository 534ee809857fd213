// batch_norm and layer_norm against float64 loops written here from the definitions.
#include "lockstep/ops/nn_norm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

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

}  // namespace
}  // namespace lockstep::ops
