#include "lockstep/ops/nn_norm.h"
#include "lockstep/core/check.h"

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "kernel_util.h"
#include "row_sums.h"

namespace lockstep::ops {
namespace {

DType stats_dtype(DType x) {
  return x == DType::bfloat16 ? DType::float32 : x;
}

void check_input(const char* op, const Tensor& x) {
  LOCKSTEP_CHECK(is_floating(x.dtype()) && x.rank() >= 1 && x.num_elements() != 0, op,
                 ": expected a non-empty floating tensor of rank >= 1. Received: x=", x.describe(),
                 ".");
}

// mixed_bfloat16's float32 form rounds float32 tensors only.
void check_bfloat16_values(const char* op, const Tensor& x, bool bfloat16_values) {
  LOCKSTEP_CHECK(
      !bfloat16_values || x.dtype() == DType::float32, op,
      ": bfloat16 values are kept in float32 tensors; expected a float32 x. Received: x=",
      x.describe(), ".");
}

void check_epsilon(const char* op, double epsilon) {
  LOCKSTEP_CHECK(epsilon >= 0.0, op, ": expected epsilon >= 0. Received: epsilon=", epsilon, ".");
}

// A per-feature vector (gamma, beta, statistics) must be [n] in x's dtype, or float32 for
// bfloat16 x.
void check_vector(const char* op, const char* name, const Tensor& p, const Tensor& x, int64_t n,
                  bool optional) {
  if (!p.defined() && optional) return;
  bool dtype_ok = p.defined() && (p.dtype() == x.dtype() ||
                                  (x.dtype() == DType::bfloat16 && p.dtype() == DType::float32));
  LOCKSTEP_CHECK(p.defined() && p.rank() == 1 && p.dim(0) == n && dtype_ok, op, ": expected ", name,
                 " of shape [", n, "] (the last axis of x) in x's dtype",
                 x.dtype() == DType::bfloat16 ? " or float32" : "", ". Received: x=", x.describe(),
                 ", ", name, "=", p.defined() ? p.describe() : std::string("undefined"), ".");
}

// Reads a parameter into doubles; an undefined one reads as `fallback`.
void read(const Tensor& p, int64_t n, double fallback, std::vector<double>& out) {
  out.assign(static_cast<size_t>(n), fallback);
  if (!p.defined()) return;
  detail::dispatch_floating(p.dtype(), "normalization", [&](auto tag) {
    using T = decltype(tag);
    const T* d = p.data<T>();
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = detail::load(d[i]);
  });
}

Tensor write(const std::vector<double>& v, const Shape& shape, DType dtype) {
  Tensor t(shape, dtype);
  detail::dispatch_floating(dtype, "normalization", [&](auto tag) {
    using T = decltype(tag);
    T* d = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) {
      d[i] = detail::store<T>(static_cast<detail::compute_t<T>>(v[i]));
    }
  });
  return t;
}

// y[m, c] = (x[m, c] - shift[c]) * scale[c] + beta[c] over x viewed as [M, C].
void per_channel_affine(const Tensor& x, const std::vector<double>& shift,
                        const std::vector<double>& scale, const std::vector<double>& beta,
                        const Tensor& y) {
  const int64_t channels = x.dim(-1), rows = x.num_elements() / channels;
  detail::dispatch_floating(x.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    thread_local std::vector<C> s, a, b;
    s.assign(shift.begin(), shift.end());
    a.assign(scale.begin(), scale.end());
    b.assign(beta.begin(), beta.end());
    const T* in = x.data<T>();
    T* out = y.data<T>();
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t c = 0; c < channels; ++c) {
        int64_t i = m * channels + c;
        out[i] = detail::store<T>((detail::load(in[i]) - s[c]) * a[c] + b[c]);
      }
    }
  });
}

// Shared by both batch-norm backward passes: sums Σ dy and Σ dy x̂ per channel, then
// dx = gamma * inv_std * (dy - centre), centre = (Σ dy + x̂ Σ dy x̂) / M in training, 0 otherwise.
NormGrads batch_norm_backward(const char* op, const Tensor& dy, const Tensor& x,
                              const Tensor& gamma, const std::vector<double>& mean,
                              const std::vector<double>& inv_std, bool training) {
  const int64_t channels = x.dim(-1), rows = x.num_elements() / channels;
  thread_local std::vector<double> g, sum_dy, sum_dy_xhat;
  read(gamma, channels, 1.0, g);
  sum_dy.assign(static_cast<size_t>(channels), 0.0);
  sum_dy_xhat.assign(static_cast<size_t>(channels), 0.0);
  Tensor dx(x.shape(), x.dtype());
  detail::dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pd = dy.data<T>();
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t c = 0; c < channels; ++c) {
        size_t uc = static_cast<size_t>(c);
        int64_t i = m * channels + c;
        double d = detail::load(pd[i]);
        sum_dy[uc] += d;
        sum_dy_xhat[uc] += d * (detail::load(px[i]) - mean[uc]) * inv_std[uc];
      }
    }
    const double inv_m = training ? 1.0 / static_cast<double>(rows) : 0.0;
    T* out = dx.data<T>();
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t c = 0; c < channels; ++c) {
        size_t uc = static_cast<size_t>(c);
        int64_t i = m * channels + c;
        double xhat = (detail::load(px[i]) - mean[uc]) * inv_std[uc];
        double centre = (sum_dy[uc] + xhat * sum_dy_xhat[uc]) * inv_m;
        double v = g[uc] * inv_std[uc] * (detail::load(pd[i]) - centre);
        out[i] = detail::store<T>(static_cast<detail::compute_t<T>>(v));
      }
    }
  });
  DType param = gamma.defined() ? gamma.dtype() : stats_dtype(x.dtype());
  Shape vec{channels};
  return {dx, gamma.defined() ? write(sum_dy_xhat, vec, gamma.dtype()) : Tensor(),
          write(sum_dy, vec, param)};
}

void check_gradient(const char* op, const Tensor& dy, const Tensor& x) {
  LOCKSTEP_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), op,
                 ": expected grad_output with x's shape and dtype. Received: grad_output=",
                 dy.describe(), ", x=", x.describe(), ".");
}

}  // namespace

BatchNormResult batch_norm_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    double epsilon) {
  const char* op = "batch_norm_training";
  check_input(op, x);
  check_epsilon(op, epsilon);
  const int64_t channels = x.dim(-1), rows = x.num_elements() / channels;
  check_vector(op, "gamma", gamma, x, channels, true);
  check_vector(op, "beta", beta, x, channels, true);
  thread_local std::vector<double> mean, var, inv_std, scale, shift;
  mean.assign(static_cast<size_t>(channels), 0.0);
  var.assign(static_cast<size_t>(channels), 0.0);
  detail::dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    // Two passes: the one-pass Σx² - (Σx)² form cancels badly when |mean| >> std.
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t c = 0; c < channels; ++c)
        mean[static_cast<size_t>(c)] += detail::load(px[m * channels + c]);
    }
    for (double& v : mean) v /= static_cast<double>(rows);
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t c = 0; c < channels; ++c) {
        double d = detail::load(px[m * channels + c]) - mean[static_cast<size_t>(c)];
        var[static_cast<size_t>(c)] += d * d;
      }
    }
    for (double& v : var) v /= static_cast<double>(rows);
  });
  read(gamma, channels, 1.0, scale);
  read(beta, channels, 0.0, shift);
  inv_std.resize(var.size());
  for (size_t c = 0; c < var.size(); ++c) {
    inv_std[c] = 1.0 / std::sqrt(var[c] + epsilon);
    scale[c] *= inv_std[c];
  }
  BatchNormResult r;
  r.output = Tensor(x.shape(), x.dtype());
  per_channel_affine(x, mean, scale, shift, r.output);
  DType s = stats_dtype(x.dtype());
  r.mean = write(mean, {channels}, s);
  r.variance = write(var, {channels}, s);
  r.inv_std = write(inv_std, {channels}, s);
  return r;
}

Tensor batch_norm_inference_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    const Tensor& moving_mean, const Tensor& moving_variance,
                                    double epsilon) {
  const char* op = "batch_norm_inference";
  check_input(op, x);
  check_epsilon(op, epsilon);
  const int64_t channels = x.dim(-1);
  check_vector(op, "gamma", gamma, x, channels, true);
  check_vector(op, "beta", beta, x, channels, true);
  check_vector(op, "moving_mean", moving_mean, x, channels, false);
  check_vector(op, "moving_variance", moving_variance, x, channels, false);
  thread_local std::vector<double> mean, var, scale, shift;
  read(moving_mean, channels, 0.0, mean);
  read(moving_variance, channels, 1.0, var);
  read(gamma, channels, 1.0, scale);
  read(beta, channels, 0.0, shift);
  for (size_t c = 0; c < var.size(); ++c) scale[c] /= std::sqrt(var[c] + epsilon);
  Tensor y(x.shape(), x.dtype());
  per_channel_affine(x, mean, scale, shift, y);
  return y;
}

NormGrads batch_norm_training_backward(const Tensor& grad_output, const Tensor& x,
                                       const Tensor& gamma, const Tensor& mean,
                                       const Tensor& inv_std) {
  const char* op = "batch_norm_training_backward";
  check_input(op, x);
  check_gradient(op, grad_output, x);
  const int64_t channels = x.dim(-1);
  check_vector(op, "gamma", gamma, x, channels, true);
  check_vector(op, "mean", mean, x, channels, false);
  check_vector(op, "inv_std", inv_std, x, channels, false);
  thread_local std::vector<double> mu, rstd;
  read(mean, channels, 0.0, mu);
  read(inv_std, channels, 1.0, rstd);
  return batch_norm_backward(op, grad_output, x, gamma, mu, rstd, /*training=*/true);
}

NormGrads batch_norm_inference_backward(const Tensor& grad_output, const Tensor& x,
                                        const Tensor& gamma, const Tensor& moving_mean,
                                        const Tensor& moving_variance, double epsilon) {
  const char* op = "batch_norm_inference_backward";
  check_input(op, x);
  check_epsilon(op, epsilon);
  check_gradient(op, grad_output, x);
  const int64_t channels = x.dim(-1);
  check_vector(op, "gamma", gamma, x, channels, true);
  check_vector(op, "moving_mean", moving_mean, x, channels, false);
  check_vector(op, "moving_variance", moving_variance, x, channels, false);
  thread_local std::vector<double> mu, rstd;
  read(moving_mean, channels, 0.0, mu);
  read(moving_variance, channels, 1.0, rstd);
  for (double& v : rstd) v = 1.0 / std::sqrt(v + epsilon);
  return batch_norm_backward(op, grad_output, x, gamma, mu, rstd, /*training=*/false);
}

LayerNormResult layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   double epsilon, bool bfloat16_values) {
  const char* op = "layer_norm";
  check_input(op, x);
  check_epsilon(op, epsilon);
  check_bfloat16_values(op, x, bfloat16_values);
  const int64_t features = x.dim(-1), rows = x.num_elements() / features;
  check_vector(op, "gamma", gamma, x, features, true);
  check_vector(op, "beta", beta, x, features, true);
  thread_local std::vector<double> g, b, mean, inv_std;
  read(gamma, features, 1.0, g);
  read(beta, features, 0.0, b);
  mean.assign(static_cast<size_t>(rows), 0.0);
  inv_std.assign(static_cast<size_t>(rows), 0.0);
  Tensor y(x.shape(), x.dtype());
  detail::dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    // mixed_bfloat16's two forms in float32 arithmetic, as Keras normalizes bfloat16 inputs:
    // bfloat16 tensors, and float32 tensors of bfloat16 values (the same bits).
    if constexpr (!std::is_same_v<T, double>) {
      if (std::is_same_v<T, bfloat16> || bfloat16_values) {
        thread_local std::vector<float> gf, bf;
        gf.assign(g.begin(), g.end());  // exact: gamma and beta are float32 or bfloat16
        bf.assign(b.begin(), b.end());
        detail::layer_norm_rows_in_float(px, rows, features, gf.data(), bf.data(),
                                         static_cast<float>(epsilon), py, mean.data(),
                                         inv_std.data());
        return;
      }
    }
    if constexpr (std::is_same_v<T, float>) {
      detail::layer_norm_rows(px, rows, features, g.data(), b.data(), epsilon, py, mean.data(),
                              inv_std.data());
      return;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = px + r * features;
      double mu = detail::row_sum(row, features) / static_cast<double>(features);
      double sq = detail::row_centered_squares(row, features, mu);
      double rstd = 1.0 / std::sqrt(sq / static_cast<double>(features) + epsilon);
      mean[static_cast<size_t>(r)] = mu;
      inv_std[static_cast<size_t>(r)] = rstd;
      for (int64_t d = 0; d < features; ++d) {
        size_t ud = static_cast<size_t>(d);
        py[r * features + d] = detail::store<T>(
            static_cast<detail::compute_t<T>>((detail::load(row[d]) - mu) * rstd * g[ud] + b[ud]));
      }
    }
  });
  if (bfloat16_values) y.mark_bfloat16_values();
  Shape stats = x.shape().without(x.rank() - 1);
  DType s = stats_dtype(x.dtype());
  return {y, write(mean, stats, s), write(inv_std, stats, s)};
}

NormGrads layer_norm_backward(const Tensor& grad_output, const Tensor& x, const Tensor& gamma,
                              const Tensor& mean, const Tensor& inv_std, bool bfloat16_values) {
  const char* op = "layer_norm_backward";
  check_input(op, x);
  check_gradient(op, grad_output, x);
  check_bfloat16_values(op, x, bfloat16_values);
  const int64_t features = x.dim(-1), rows = x.num_elements() / features;
  check_vector(op, "gamma", gamma, x, features, true);
  Shape stats = x.shape().without(x.rank() - 1);
  for (const Tensor* t : {&mean, &inv_std}) {
    LOCKSTEP_CHECK(
        !(!t->defined() || !(t->shape() == stats) || t->dtype() != stats_dtype(x.dtype())), op,
        ": expected mean and inv_std of shape ", stats.to_string(),
        " as returned by layer_norm. Received: x=", x.describe(), ", mean=", mean.describe(),
        ", inv_std=", inv_std.describe(), ".");
  }
  thread_local std::vector<double> g, mu, rstd, dgamma, dbeta;
  read(gamma, features, 1.0, g);
  mu.resize(static_cast<size_t>(rows));
  rstd.resize(static_cast<size_t>(rows));
  detail::dispatch_floating(mean.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t r = 0; r < rows; ++r) {
      mu[static_cast<size_t>(r)] = detail::load(mean.data<T>()[r]);
      rstd[static_cast<size_t>(r)] = detail::load(inv_std.data<T>()[r]);
    }
  });
  dgamma.assign(static_cast<size_t>(features), 0.0);
  dbeta.assign(static_cast<size_t>(features), 0.0);
  Tensor dx(x.shape(), x.dtype());
  detail::dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    if constexpr (!std::is_same_v<T, double>) {
      if (std::is_same_v<T, bfloat16> || bfloat16_values) {
        thread_local std::vector<float> gf;
        gf.assign(g.begin(), g.end());  // exact: gamma is float32 or bfloat16
        detail::layer_norm_rows_grad_in_float(grad_output.data<T>(), x.data<T>(), rows, features,
                                              gf.data(), mu.data(), rstd.data(), dgamma.data(),
                                              dbeta.data(), dx.data<T>());
        return;
      }
    }
    if constexpr (std::is_same_v<T, float>) {
      detail::layer_norm_rows_grad(grad_output.data<T>(), x.data<T>(), rows, features, g.data(),
                                   mu.data(), rstd.data(), dgamma.data(), dbeta.data(),
                                   dx.data<T>());
      return;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const T* px = x.data<T>() + r * features;
      const T* pd = grad_output.data<T>() + r * features;
      T* out = dx.data<T>() + r * features;
      const double m = mu[static_cast<size_t>(r)], s = rstd[static_cast<size_t>(r)];
      double mean_g = 0, mean_gx = 0;
      detail::row_gradient_sums(pd, px, g.data(), features, m, s, mean_g, mean_gx);
      for (int64_t d = 0; d < features; ++d) {
        size_t ud = static_cast<size_t>(d);
        double dy = detail::load(pd[d]), xhat = (detail::load(px[d]) - m) * s;
        dgamma[ud] += dy * xhat;
        dbeta[ud] += dy;
      }
      mean_g /= static_cast<double>(features);
      mean_gx /= static_cast<double>(features);
      for (int64_t d = 0; d < features; ++d) {
        size_t ud = static_cast<size_t>(d);
        double xhat = (detail::load(px[d]) - m) * s;
        double v = s * (detail::load(pd[d]) * g[ud] - mean_g - xhat * mean_gx);
        out[d] = detail::store<T>(static_cast<C>(v));
      }
    }
  });
  DType param = gamma.defined() ? gamma.dtype() : stats_dtype(x.dtype());
  Shape vec{features};
  return {dx, gamma.defined() ? write(dgamma, vec, gamma.dtype()) : Tensor(),
          write(dbeta, vec, param)};
}

}  // namespace lockstep::ops
