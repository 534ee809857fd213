#include "row_sums.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/cpu_dispatch.h"

namespace lockstep::ops::detail {
namespace {

typedef double RowD8 __attribute__((vector_size(64)));
typedef float RowF8 __attribute__((vector_size(32)));
typedef uint16_t RowH8 __attribute__((vector_size(16)));
typedef uint32_t RowW8 __attribute__((vector_size(32)));

[[gnu::always_inline]] inline void load8(RowD8& out, const float* p) {
  RowF8 f;
  std::memcpy(&f, p, sizeof f);
  out = __builtin_convertvector(f, RowD8);
}
[[gnu::always_inline]] inline void load8(RowD8& out, const bfloat16* p) {
  RowH8 h;
  std::memcpy(&h, p, sizeof h);
  const RowW8 bits = __builtin_convertvector(h, RowW8) << 16;  // bfloat16 -> float32 bits
  out = __builtin_convertvector((RowF8)bits, RowD8);
}
[[gnu::always_inline]] inline void load8(RowD8& out, const double* p) {
  std::memcpy(&out, p, sizeof out);
}
[[gnu::always_inline]] inline double lanes_sum(const RowD8& v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}
inline double scalar(float v) {
  return v;
}
inline double scalar(bfloat16 v) {
  return static_cast<float>(v);
}
inline double scalar(double v) {
  return v;
}

template <typename T>
[[gnu::always_inline]] inline double sum_of(const T* x, int64_t n) {
  RowD8 acc{}, v;
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    load8(v, x + d);
    acc += v;
  }
  double sum = lanes_sum(acc);
  for (; d < n; ++d) sum += scalar(x[d]);
  return sum;
}

template <typename T>
[[gnu::always_inline]] inline double centered_squares_of(const T* x, int64_t n, double mu) {
  RowD8 acc{}, v;
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    load8(v, x + d);
    v -= mu;
    acc += v * v;
  }
  double sum = lanes_sum(acc);
  for (; d < n; ++d) sum += (scalar(x[d]) - mu) * (scalar(x[d]) - mu);
  return sum;
}

template <typename T>
[[gnu::always_inline]] inline void gradient_sums_of(const T* dy, const T* x, const double* g,
                                                    int64_t n, double mu, double s, double& sum_g,
                                                    double& sum_gx) {
  RowD8 ag{}, agx{}, vd, vx, vg;
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    load8(vd, dy + d);
    load8(vx, x + d);
    load8(vg, g + d);
    const RowD8 dg = vd * vg;
    ag += dg;
    agx += dg * ((vx - mu) * s);
  }
  sum_g = lanes_sum(ag);
  sum_gx = lanes_sum(agx);
  for (; d < n; ++d) {
    const double dg = scalar(dy[d]) * g[d];
    sum_g += dg;
    sum_gx += dg * ((scalar(x[d]) - mu) * s);
  }
}

// Element stores of the row passes: a float, or its bfloat16 rounding (round to nearest, ties to
// even; NaN stays a quiet NaN), written without a branch so that the loops vectorise. Bit for bit
// bfloat16(float).
[[gnu::always_inline]] inline void store_as(float* p, double v) {
  *p = static_cast<float>(v);
}
[[gnu::always_inline]] inline void store_as(bfloat16* p, double v) {
  const float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;
  const uint16_t bits =
      static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  *p = bfloat16::from_bits(bits);
}

template <typename T>
[[gnu::always_inline]] inline void normalize_row(const T* __restrict x, const double* __restrict g,
                                                 const double* __restrict b, int64_t n, double mu,
                                                 double s, T* __restrict y) {
  for (int64_t d = 0; d < n; ++d) store_as(y + d, (scalar(x[d]) - mu) * s * g[d] + b[d]);
}

template <typename T>
[[gnu::always_inline]] inline void normalize_row_grad(const T* __restrict dy, const T* __restrict x,
                                                      const double* __restrict g, int64_t n,
                                                      double mu, double s, double mean_g,
                                                      double mean_gx, double* __restrict dgamma,
                                                      double* __restrict dbeta, T* __restrict dx) {
  for (int64_t d = 0; d < n; ++d) {
    const double vdy = scalar(dy[d]), xhat = (scalar(x[d]) - mu) * s;
    dgamma[d] += vdy * xhat;
    dbeta[d] += vdy;
    store_as(dx + d, s * (vdy * g[d] - mean_g - xhat * mean_gx));
  }
}

template <typename T>
[[gnu::always_inline]] inline void normalize_rows(const T* x, int64_t rows, int64_t n,
                                                  const double* g, const double* b, double epsilon,
                                                  T* y, double* mean, double* inv_std) {
  const double count = static_cast<double>(n);
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * n;
    const double mu = sum_of(row, n) / count;
    const double rstd = 1.0 / std::sqrt(centered_squares_of(row, n, mu) / count + epsilon);
    mean[r] = mu;
    inv_std[r] = rstd;
    normalize_row(row, g, b, n, mu, rstd, y + r * n);
  }
}

template <typename T>
[[gnu::always_inline]] inline void normalize_rows_grad(const T* dy, const T* x, int64_t rows,
                                                       int64_t n, const double* g,
                                                       const double* mean, const double* inv_std,
                                                       double* dgamma, double* dbeta, T* dx) {
  const double count = static_cast<double>(n);
  for (int64_t r = 0; r < rows; ++r) {
    const T* pd = dy + r * n;
    const T* px = x + r * n;
    double sum_g = 0, sum_gx = 0;
    gradient_sums_of(pd, px, g, n, mean[r], inv_std[r], sum_g, sum_gx);
    normalize_row_grad(pd, px, g, n, mean[r], inv_std[r], sum_g / count, sum_gx / count, dgamma,
                       dbeta, dx + r * n);
  }
}

}  // namespace

LOCKSTEP_DISPATCHED(void, layer_norm_rows,
                    (const float* x, int64_t rows, int64_t n, const double* g, const double* b,
                     double epsilon, float* y, double* mean, double* inv_std),
                    (x, rows, n, g, b, epsilon, y, mean, inv_std)) {
  normalize_rows(x, rows, n, g, b, epsilon, y, mean, inv_std);
}
LOCKSTEP_DISPATCHED(void, layer_norm_rows,
                    (const bfloat16* x, int64_t rows, int64_t n, const double* g, const double* b,
                     double epsilon, bfloat16* y, double* mean, double* inv_std),
                    (x, rows, n, g, b, epsilon, y, mean, inv_std)) {
  normalize_rows(x, rows, n, g, b, epsilon, y, mean, inv_std);
}
LOCKSTEP_DISPATCHED(void, layer_norm_rows_grad,
                    (const float* dy, const float* x, int64_t rows, int64_t n, const double* g,
                     const double* mean, const double* inv_std, double* dgamma, double* dbeta,
                     float* dx),
                    (dy, x, rows, n, g, mean, inv_std, dgamma, dbeta, dx)) {
  normalize_rows_grad(dy, x, rows, n, g, mean, inv_std, dgamma, dbeta, dx);
}
LOCKSTEP_DISPATCHED(void, layer_norm_rows_grad,
                    (const bfloat16* dy, const bfloat16* x, int64_t rows, int64_t n,
                     const double* g, const double* mean, const double* inv_std, double* dgamma,
                     double* dbeta, bfloat16* dx),
                    (dy, x, rows, n, g, mean, inv_std, dgamma, dbeta, dx)) {
  normalize_rows_grad(dy, x, rows, n, g, mean, inv_std, dgamma, dbeta, dx);
}

LOCKSTEP_DISPATCHED(double, row_sum, (const float* x, int64_t n), (x, n)) {
  return sum_of(x, n);
}
LOCKSTEP_DISPATCHED(double, row_sum, (const bfloat16* x, int64_t n), (x, n)) {
  return sum_of(x, n);
}
LOCKSTEP_DISPATCHED(double, row_centered_squares, (const float* x, int64_t n, double mu),
                    (x, n, mu)) {
  return centered_squares_of(x, n, mu);
}
LOCKSTEP_DISPATCHED(double, row_centered_squares, (const bfloat16* x, int64_t n, double mu),
                    (x, n, mu)) {
  return centered_squares_of(x, n, mu);
}
LOCKSTEP_DISPATCHED(void, row_gradient_sums,
                    (const float* dy, const float* x, const double* g, int64_t n, double mu,
                     double s, double& sum_g, double& sum_gx),
                    (dy, x, g, n, mu, s, sum_g, sum_gx)) {
  gradient_sums_of(dy, x, g, n, mu, s, sum_g, sum_gx);
}
LOCKSTEP_DISPATCHED(void, row_gradient_sums,
                    (const bfloat16* dy, const bfloat16* x, const double* g, int64_t n, double mu,
                     double s, double& sum_g, double& sum_gx),
                    (dy, x, g, n, mu, s, sum_g, sum_gx)) {
  gradient_sums_of(dy, x, g, n, mu, s, sum_g, sum_gx);
}

}  // namespace lockstep::ops::detail
