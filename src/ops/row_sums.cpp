#include "row_sums.h"

#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/cpu_dispatch.h"

namespace lockstep::ops::detail {
namespace {

// Eight double lanes of a row's sums, whatever the build: one 64-byte vector in the x86-64-v4
// build, two 32-byte ones in x86-64-v3 and four 16-byte ones in the baseline (W: the build's float
// lanes, LOCKSTEP_DISPATCHED_LANES), so that every part is one register — a 64-byte vector in the
// AVX2 build would be lowered through the stack. Lane i holds the elements i mod 8 in every build,
// and lanes_sum adds them in one fixed tree: the sums have the same bits in every build.
template <int W>
struct Row8 {
  static constexpr int kLanes = W / 2;  // doubles per register
  static constexpr int kParts = 8 / kLanes;
  typedef double D __attribute__((vector_size(8 * kLanes)));
  typedef float F __attribute__((vector_size(4 * kLanes)));
  typedef uint16_t H __attribute__((vector_size(2 * kLanes)));
  typedef uint32_t U __attribute__((vector_size(4 * kLanes)));
  D part[kParts];
};

template <int W>
[[gnu::always_inline]] inline void load8(Row8<W>& out, const float* p) {
  for (int k = 0; k < Row8<W>::kParts; ++k) {
    typename Row8<W>::F f;
    std::memcpy(&f, p + k * Row8<W>::kLanes, sizeof f);
    out.part[k] = __builtin_convertvector(f, typename Row8<W>::D);
  }
}
template <int W>
[[gnu::always_inline]] inline void load8(Row8<W>& out, const bfloat16* p) {
  for (int k = 0; k < Row8<W>::kParts; ++k) {
    typename Row8<W>::H h;
    std::memcpy(&h, p + k * Row8<W>::kLanes, sizeof h);
    // bfloat16 -> float32 bits
    const auto bits = __builtin_convertvector(h, typename Row8<W>::U) << 16;
    out.part[k] = __builtin_convertvector((typename Row8<W>::F)bits, typename Row8<W>::D);
  }
}
template <int W>
[[gnu::always_inline]] inline void load8(Row8<W>& out, const double* p) {
  // Part by part: one register load each (a copy of the whole would go through the stack).
  for (int k = 0; k < Row8<W>::kParts; ++k) {
    std::memcpy(&out.part[k], p + k * Row8<W>::kLanes, sizeof out.part[k]);
  }
}
template <int W>
[[gnu::always_inline]] inline double lane(const Row8<W>& v, int i) {
  return v.part[i / Row8<W>::kLanes][i % Row8<W>::kLanes];
}
template <int W>
[[gnu::always_inline]] inline double lanes_sum(const Row8<W>& v) {
  return ((lane(v, 0) + lane(v, 1)) + (lane(v, 2) + lane(v, 3))) +
         ((lane(v, 4) + lane(v, 5)) + (lane(v, 6) + lane(v, 7)));
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

template <int W, typename T>
[[gnu::always_inline]] inline double sum_of(const T* x, int64_t n) {
  Row8<W> acc{}, v;
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    load8(v, x + d);
    for (int k = 0; k < Row8<W>::kParts; ++k) acc.part[k] += v.part[k];
  }
  double sum = lanes_sum(acc);
  for (; d < n; ++d) sum += scalar(x[d]);
  return sum;
}

template <int W, typename T>
[[gnu::always_inline]] inline double centered_squares_of(const T* x, int64_t n, double mu) {
  Row8<W> acc{}, v;
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    load8(v, x + d);
    for (int k = 0; k < Row8<W>::kParts; ++k) {
      const typename Row8<W>::D c = v.part[k] - mu;
      acc.part[k] += c * c;
    }
  }
  double sum = lanes_sum(acc);
  for (; d < n; ++d) sum += (scalar(x[d]) - mu) * (scalar(x[d]) - mu);
  return sum;
}

template <int W, typename T>
[[gnu::always_inline]] inline void gradient_sums_of(const T* dy, const T* x, const double* g,
                                                    int64_t n, double mu, double s, double& sum_g,
                                                    double& sum_gx) {
  Row8<W> ag{}, agx{}, vd, vx, vg;
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    load8(vd, dy + d);
    load8(vx, x + d);
    load8(vg, g + d);
    for (int k = 0; k < Row8<W>::kParts; ++k) {
      const typename Row8<W>::D dg = vd.part[k] * vg.part[k];
      ag.part[k] += dg;
      agx.part[k] += dg * ((vx.part[k] - mu) * s);
    }
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
[[gnu::always_inline]] inline void store_as(float* p, float v) {
  *p = v;
}
[[gnu::always_inline]] inline void store_as(bfloat16* p, float f) {
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

template <int W, typename T>
[[gnu::always_inline]] inline void normalize_rows(const T* x, int64_t rows, int64_t n,
                                                  const double* g, const double* b, double epsilon,
                                                  T* y, double* mean, double* inv_std) {
  const double count = static_cast<double>(n);
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * n;
    const double mu = sum_of<W>(row, n) / count;
    const double rstd = 1.0 / std::sqrt(centered_squares_of<W>(row, n, mu) / count + epsilon);
    mean[r] = mu;
    inv_std[r] = rstd;
    normalize_row(row, g, b, n, mu, rstd, y + r * n);
  }
}

template <int W, typename T>
[[gnu::always_inline]] inline void normalize_rows_grad(const T* dy, const T* x, int64_t rows,
                                                       int64_t n, const double* g,
                                                       const double* mean, const double* inv_std,
                                                       double* dgamma, double* dbeta, T* dx) {
  const double count = static_cast<double>(n);
  for (int64_t r = 0; r < rows; ++r) {
    const T* pd = dy + r * n;
    const T* px = x + r * n;
    double sum_g = 0, sum_gx = 0;
    gradient_sums_of<W>(pd, px, g, n, mean[r], inv_std[r], sum_g, sum_gx);
    normalize_row_grad(pd, px, g, n, mean[r], inv_std[r], sum_g / count, sum_gx / count, dgamma,
                       dbeta, dx + r * n);
  }
}

// mixed_bfloat16's float32 form: float32 arithmetic, as a bfloat16 kernel accumulates. Eight float
// lanes whatever the build (one 32-byte register in the v3 and v4 builds, two 16-byte ones in the
// baseline); lane i holds the elements i mod 8 and lanes_sum adds them in one fixed tree, so the
// sums have the same bits in every build.
template <int W>
struct Float8 {
  static constexpr int kLanes = W >= 8 ? 8 : 4;
  static constexpr int kParts = 8 / kLanes;
  typedef float F __attribute__((vector_size(4 * kLanes)));
  F part[kParts];
};

template <int W>
[[gnu::always_inline]] inline void load8(Float8<W>& out, const float* p) {
  for (int k = 0; k < Float8<W>::kParts; ++k) {
    std::memcpy(&out.part[k], p + k * Float8<W>::kLanes, sizeof out.part[k]);
  }
}
template <int W>
[[gnu::always_inline]] inline float lanes_sum(const Float8<W>& v) {
  auto lane = [&](int i) { return v.part[i / Float8<W>::kLanes][i % Float8<W>::kLanes]; };
  return ((lane(0) + lane(1)) + (lane(2) + lane(3))) + ((lane(4) + lane(5)) + (lane(6) + lane(7)));
}

template <int W>
[[gnu::always_inline]] inline float float_sum_of(const float* x, int64_t n) {
  Float8<W> acc{}, v;
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    load8(v, x + d);
    for (int k = 0; k < Float8<W>::kParts; ++k) acc.part[k] += v.part[k];
  }
  float sum = lanes_sum(acc);
  for (; d < n; ++d) sum += x[d];
  return sum;
}

template <int W>
[[gnu::always_inline]] inline float float_centered_squares_of(const float* x, int64_t n, float mu) {
  Float8<W> acc{}, v;
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    load8(v, x + d);
    for (int k = 0; k < Float8<W>::kParts; ++k) {
      const typename Float8<W>::F c = v.part[k] - mu;
      acc.part[k] += c * c;
    }
  }
  float sum = lanes_sum(acc);
  for (; d < n; ++d) sum += (x[d] - mu) * (x[d] - mu);
  return sum;
}

// sum_g = Σ dy·g and sum_gx = Σ dy·g·((x − mu)·s), in float.
template <int W>
[[gnu::always_inline]] inline void float_gradient_sums_of(const float* dy, const float* x,
                                                          const float* g, int64_t n, float mu,
                                                          float s, float& sum_g, float& sum_gx) {
  Float8<W> ag{}, agx{}, vd, vx, vg;
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    load8(vd, dy + d);
    load8(vx, x + d);
    load8(vg, g + d);
    for (int k = 0; k < Float8<W>::kParts; ++k) {
      const typename Float8<W>::F dg = vd.part[k] * vg.part[k];
      ag.part[k] += dg;
      agx.part[k] += dg * ((vx.part[k] - mu) * s);
    }
  }
  sum_g = lanes_sum(ag);
  sum_gx = lanes_sum(agx);
  for (; d < n; ++d) {
    const float dg = dy[d] * g[d];
    sum_g += dg;
    sum_gx += dg * ((x[d] - mu) * s);
  }
}

// A row as floats: a float row as it is; a bfloat16 row converted into `buffer` (exact).
[[gnu::always_inline]] inline const float* float_row(const float* row, int64_t, float*) {
  return row;
}
[[gnu::always_inline]] inline const float* float_row(const bfloat16* row, int64_t n,
                                                     float* __restrict buffer) {
  for (int64_t d = 0; d < n; ++d) buffer[d] = static_cast<float>(row[d]);
  return buffer;
}
// An output that is a bfloat16 value already: as a float, or as its bfloat16 bits (exact).
[[gnu::always_inline]] inline void store_value(float* p, float v) {
  *p = v;
}
[[gnu::always_inline]] inline void store_value(bfloat16* p, float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  *p = bfloat16::from_bits(static_cast<uint16_t>(u >> 16));
}

// T float: mixed_bfloat16's float32 form (float32 tensors of bfloat16 values); T bfloat16: its
// bfloat16 tensors, converted row by row into an L1-sized buffer and normalized by the same float
// code, so that both forms give the same bits.
template <int W, typename T>
[[gnu::always_inline]] inline void normalize_rows_in_float(const T* x, int64_t rows, int64_t n,
                                                           const float* __restrict g,
                                                           const float* __restrict b, float epsilon,
                                                           T* __restrict y, double* mean,
                                                           double* inv_std) {
  const float count = static_cast<float>(n);
  thread_local std::vector<float> buffer;
  buffer.resize(std::is_same_v<T, float> ? 0 : static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict row = float_row(x + r * n, n, buffer.data());
    const float mu = float_sum_of<W>(row, n) / count;
    const float s = 1.0f / std::sqrt(float_centered_squares_of<W>(row, n, mu) / count + epsilon);
    mean[r] = mu;
    inv_std[r] = s;
    T* __restrict out = y + r * n;
    for (int64_t d = 0; d < n; ++d)
      store_value(out + d, round_to_bfloat16_value((row[d] - mu) * s * g[d] + b[d]));
  }
}

// dy is read rounded to bfloat16 values (a bfloat16 dy: converted, exactly); dx is stored as a
// float (T float) or rounded to bfloat16 (T bfloat16).
template <int W, typename T>
[[gnu::always_inline]] inline void normalize_rows_grad_in_float(
    const T* dy, const T* x, int64_t rows, int64_t n, const float* __restrict g, const double* mean,
    const double* inv_std, double* __restrict dgamma, double* __restrict dbeta, T* dx) {
  const float count = static_cast<float>(n);
  // Each row of dy (and of a bfloat16 x) as floats in L1-sized buffers first (separate short loops
  // keep the row passes' registers as they are).
  thread_local std::vector<float> rounded, xs;
  rounded.resize(static_cast<size_t>(n));
  xs.resize(std::is_same_v<T, float> ? 0 : static_cast<size_t>(n));
  float* __restrict pd = rounded.data();
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict in = dy + r * n;
    if constexpr (std::is_same_v<T, float>) {
      for (int64_t d = 0; d < n; ++d) pd[d] = round_to_bfloat16_value(in[d]);
    } else {
      float_row(in, n, pd);
    }
    const float* __restrict px = float_row(x + r * n, n, xs.data());
    const float mu = static_cast<float>(mean[r]), s = static_cast<float>(inv_std[r]);
    float sum_g = 0, sum_gx = 0;
    float_gradient_sums_of<W>(pd, px, g, n, mu, s, sum_g, sum_gx);
    const float mean_g = sum_g / count, mean_gx = sum_gx / count;
    T* __restrict out = dx + r * n;
    for (int64_t d = 0; d < n; ++d) {
      const float xhat = (px[d] - mu) * s;
      dgamma[d] += static_cast<double>(pd[d] * xhat);
      dbeta[d] += static_cast<double>(pd[d]);
      store_as(out + d, s * (pd[d] * g[d] - mean_g - xhat * mean_gx));
    }
  }
}

}  // namespace

LOCKSTEP_DISPATCHED_LANES(void, layer_norm_rows,
                          (const float* x, int64_t rows, int64_t n, const double* g,
                           const double* b, double epsilon, float* y, double* mean,
                           double* inv_std),
                          (x, rows, n, g, b, epsilon, y, mean, inv_std)) {
  normalize_rows<kFloatLanes>(x, rows, n, g, b, epsilon, y, mean, inv_std);
}
LOCKSTEP_DISPATCHED_LANES(void, layer_norm_rows_in_float,
                          (const bfloat16* x, int64_t rows, int64_t n, const float* g,
                           const float* b, float epsilon, bfloat16* y, double* mean,
                           double* inv_std),
                          (x, rows, n, g, b, epsilon, y, mean, inv_std)) {
  normalize_rows_in_float<kFloatLanes>(x, rows, n, g, b, epsilon, y, mean, inv_std);
}
LOCKSTEP_DISPATCHED_LANES(void, layer_norm_rows_grad,
                          (const float* dy, const float* x, int64_t rows, int64_t n,
                           const double* g, const double* mean, const double* inv_std,
                           double* dgamma, double* dbeta, float* dx),
                          (dy, x, rows, n, g, mean, inv_std, dgamma, dbeta, dx)) {
  normalize_rows_grad<kFloatLanes>(dy, x, rows, n, g, mean, inv_std, dgamma, dbeta, dx);
}
LOCKSTEP_DISPATCHED_LANES(void, layer_norm_rows_grad_in_float,
                          (const bfloat16* dy, const bfloat16* x, int64_t rows, int64_t n,
                           const float* g, const double* mean, const double* inv_std,
                           double* dgamma, double* dbeta, bfloat16* dx),
                          (dy, x, rows, n, g, mean, inv_std, dgamma, dbeta, dx)) {
  normalize_rows_grad_in_float<kFloatLanes>(dy, x, rows, n, g, mean, inv_std, dgamma, dbeta, dx);
}

LOCKSTEP_DISPATCHED_LANES(void, layer_norm_rows_in_float,
                          (const float* x, int64_t rows, int64_t n, const float* g, const float* b,
                           float epsilon, float* y, double* mean, double* inv_std),
                          (x, rows, n, g, b, epsilon, y, mean, inv_std)) {
  normalize_rows_in_float<kFloatLanes>(x, rows, n, g, b, epsilon, y, mean, inv_std);
}
LOCKSTEP_DISPATCHED_LANES(void, layer_norm_rows_grad_in_float,
                          (const float* dy, const float* x, int64_t rows, int64_t n, const float* g,
                           const double* mean, const double* inv_std, double* dgamma, double* dbeta,
                           float* dx),
                          (dy, x, rows, n, g, mean, inv_std, dgamma, dbeta, dx)) {
  normalize_rows_grad_in_float<kFloatLanes>(dy, x, rows, n, g, mean, inv_std, dgamma, dbeta, dx);
}

LOCKSTEP_DISPATCHED_LANES(double, row_sum, (const float* x, int64_t n), (x, n)) {
  return sum_of<kFloatLanes>(x, n);
}
LOCKSTEP_DISPATCHED_LANES(double, row_sum, (const bfloat16* x, int64_t n), (x, n)) {
  return sum_of<kFloatLanes>(x, n);
}
LOCKSTEP_DISPATCHED_LANES(double, row_centered_squares, (const float* x, int64_t n, double mu),
                          (x, n, mu)) {
  return centered_squares_of<kFloatLanes>(x, n, mu);
}
LOCKSTEP_DISPATCHED_LANES(double, row_centered_squares, (const bfloat16* x, int64_t n, double mu),
                          (x, n, mu)) {
  return centered_squares_of<kFloatLanes>(x, n, mu);
}
LOCKSTEP_DISPATCHED_LANES(void, row_gradient_sums,
                          (const float* dy, const float* x, const double* g, int64_t n, double mu,
                           double s, double& sum_g, double& sum_gx),
                          (dy, x, g, n, mu, s, sum_g, sum_gx)) {
  gradient_sums_of<kFloatLanes>(dy, x, g, n, mu, s, sum_g, sum_gx);
}
LOCKSTEP_DISPATCHED_LANES(void, row_gradient_sums,
                          (const bfloat16* dy, const bfloat16* x, const double* g, int64_t n,
                           double mu, double s, double& sum_g, double& sum_gx),
                          (dy, x, g, n, mu, s, sum_g, sum_gx)) {
  gradient_sums_of<kFloatLanes>(dy, x, g, n, mu, s, sum_g, sum_gx);
}

}  // namespace lockstep::ops::detail
