#pragma once
// Internal to the ops layer: the per-row sums of layer normalization, accumulated in double with
// 8 independent partial sums. A serial double sum is one dependent add per element (4 cycles
// each); on rows of transformer width (64) that chain, not the arithmetic, set the speed.
// float64 rows keep the serial order (gradient checks compare against it bit for bit).
#include <cstdint>

#include "lockstep/core/bfloat16.h"

namespace lockstep::ops::detail {

// Σ x, Σ (x − mu)², and sum_g = Σ dy·g, sum_gx = Σ dy·g·(x − mu)·s (g in double). float and
// bfloat16 rows run in row_sums.cpp (built for AVX-512 as well); float64 rows serially here.
double row_sum(const float* x, int64_t n);
double row_sum(const bfloat16* x, int64_t n);
double row_centered_squares(const float* x, int64_t n, double mu);
double row_centered_squares(const bfloat16* x, int64_t n, double mu);
void row_gradient_sums(const float* dy, const float* x, const double* g, int64_t n, double mu,
                       double s, double& sum_g, double& sum_gx);
void row_gradient_sums(const bfloat16* dy, const bfloat16* x, const double* g, int64_t n, double mu,
                       double s, double& sum_g, double& sum_gx);

// Layer normalization of `rows` rows of n features, whole tensors per call (the rows' loop runs
// inside each ISA build, row_sums.cpp), in double like the sums above:
//   forward:  mean = Σx / n,  inv_std = 1 / sqrt(Σ(x − mean)² / n + epsilon),
//             y = (x − mean)·inv_std·g + b
//   backward: xhat = (x − mean)·inv_std;  mean_g = Σ dy·g / n;  mean_gx = Σ dy·g·xhat / n;
//             dgamma += dy·xhat;  dbeta += dy;  dx = inv_std·(dy·g − mean_g − xhat·mean_gx)
// y and dx are stored through float, as a scalar loop storing static_cast<float>(v) does.
void layer_norm_rows(const float* x, int64_t rows, int64_t n, const double* g, const double* b,
                     double epsilon, float* y, double* mean, double* inv_std);
void layer_norm_rows_grad(const float* dy, const float* x, int64_t rows, int64_t n, const double* g,
                          const double* mean, const double* inv_std, double* dgamma, double* dbeta,
                          float* dx);
// mixed_bfloat16's float32 form (keras/layer.h): float32 tensors of bfloat16 values, normalized
// in float32 arithmetic as a bfloat16 kernel computes (the formulas above with every intermediate
// a float; the row sums in eight float lanes in the same fixed order; dgamma and dbeta still
// accumulate over the rows in double). The forward stores y rounded to bfloat16 values, the
// backward reads dy so rounded (round_to_bfloat16_value) and stores dx as a float.
void layer_norm_rows_in_float(const float* x, int64_t rows, int64_t n, const float* g,
                              const float* b, float epsilon, float* y, double* mean,
                              double* inv_std);
void layer_norm_rows_grad_in_float(const float* dy, const float* x, int64_t rows, int64_t n,
                                   const float* g, const double* mean, const double* inv_std,
                                   double* dgamma, double* dbeta, float* dx);
// bfloat16 tensors (mixed_bfloat16's bfloat16 form): float32 arithmetic, as Keras normalizes
// bfloat16 inputs, by the float32 form's code and with its bits; dx is stored rounded to bfloat16.
void layer_norm_rows_in_float(const bfloat16* x, int64_t rows, int64_t n, const float* g,
                              const float* b, float epsilon, bfloat16* y, double* mean,
                              double* inv_std);
void layer_norm_rows_grad_in_float(const bfloat16* dy, const bfloat16* x, int64_t rows, int64_t n,
                                   const float* g, const double* mean, const double* inv_std,
                                   double* dgamma, double* dbeta, bfloat16* dx);

inline double row_sum(const double* x, int64_t n) {
  double sum = 0;
  for (int64_t d = 0; d < n; ++d) sum += x[d];
  return sum;
}
inline double row_centered_squares(const double* x, int64_t n, double mu) {
  double sum = 0;
  for (int64_t d = 0; d < n; ++d) sum += (x[d] - mu) * (x[d] - mu);
  return sum;
}
inline void row_gradient_sums(const double* dy, const double* x, const double* g, int64_t n,
                              double mu, double s, double& sum_g, double& sum_gx) {
  sum_g = 0;
  sum_gx = 0;
  for (int64_t d = 0; d < n; ++d) {
    const double dg = dy[d] * g[d];
    sum_g += dg;
    sum_gx += dg * ((x[d] - mu) * s);
  }
}

}  // namespace lockstep::ops::detail
