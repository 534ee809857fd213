#include "lockstep/ops/losses.h"
#include "lockstep/core/check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "core/cpu_dispatch.h"
#include "core/rows_to_columns.h"
#include "kernel_util.h"

namespace lockstep::ops {
namespace {

void check_pair(const Tensor& y_true, const Tensor& y_pred, const char* op) {
  detail::check_floating(y_true, op, "y_true");
  detail::check_floating(y_pred, op, "y_pred");
  LOCKSTEP_CHECK(y_true.shape() == y_pred.shape() && y_true.dtype() == y_pred.dtype(), op,
                 ": expected y_true and y_pred of the same shape and dtype. Received: y_true ",
                 y_true.describe(), " and y_pred ", y_pred.describe(), ".");
  LOCKSTEP_CHECK(y_pred.rank() != 0, op,
                 ": expected y_pred of rank >= 1. Received: ", y_pred.describe(), ".");
}

void check_dloss(const Tensor& dloss, const Tensor& y_pred, int axis, const char* op) {
  detail::check_floating(dloss, op, "dloss");
  Shape expected = y_pred.shape().without(axis);
  LOCKSTEP_CHECK(dloss.shape() == expected && dloss.dtype() == y_pred.dtype(), op,
                 ": expected dloss of shape ", expected.to_string(), " for y_pred ",
                 y_pred.describe(), ". Received: ", dloss.describe(), ".");
}

void check_labels(const Tensor& labels, const Tensor& y_pred, const char* op) {
  detail::check_defined(labels, op, "labels");
  detail::check_floating(y_pred, op, "y_pred");
  LOCKSTEP_CHECK(labels.dtype() == DType::int32 || labels.dtype() == DType::int64, op,
                 ": expected int32 or int64 labels. Received: ", labels.describe(), ".");
  LOCKSTEP_CHECK(
      y_pred.rank() != 0 && labels.shape() == y_pred.shape().without(-1), op,
      ": expected labels of shape [...] and y_pred of shape [..., classes]. Received: labels ",
      labels.describe(), " and y_pred ", y_pred.describe(), ".");
}

int64_t label_at(const Tensor& labels, int64_t i, int64_t classes, const char* op) {
  int64_t k =
      labels.dtype() == DType::int32 ? labels.data<int32_t>()[i] : labels.data<int64_t>()[i];
  LOCKSTEP_CHECK(k >= 0 && k < classes, op, ": label ", k, " at index ", i, " is outside [0, ",
                 classes, ").");
  return k;
}

template <typename C>
C clip(C v) {
  return std::clamp(v, static_cast<C>(kLossEpsilon), static_cast<C>(1.0 - kLossEpsilon));
}
template <typename C>
bool inside_clip(C v) {
  return v >= static_cast<C>(kLossEpsilon) && v <= static_cast<C>(1.0 - kLossEpsilon);
}

// Calls f(T) after allocating `out`; the loops below index with AxisSplit (inner > 1 only when the
// class axis is not last).
template <typename F>
void with_type(DType dtype, const char* op, F&& f) {
  detail::dispatch_floating(dtype, op, std::forward<F>(f));
}

}  // namespace

Tensor categorical_crossentropy_forward(const Tensor& y_true, const Tensor& y_pred,
                                        bool from_logits, int axis) {
  const char* op = "categorical_crossentropy";
  check_pair(y_true, y_pred, op);
  const int ax = y_pred.shape().normalize_axis(axis);
  detail::AxisSplit s = detail::split_at_axis(y_pred.shape(), ax);
  Tensor loss(y_pred.shape().without(ax), y_pred.dtype());
  with_type(y_pred.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    const T* t = y_true.data<T>();
    const T* p = y_pred.data<T>();
    T* l = loss.data<T>();
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t in = 0; in < s.inner; ++in) {
        const int64_t base = o * s.n * s.inner + in;
        auto at = [&](const T* v, int64_t i) { return detail::load(v[base + i * s.inner]); };
        C sum = 0, total = 0;
        if (from_logits) {
          C m = -std::numeric_limits<C>::infinity();
          for (int64_t i = 0; i < s.n; ++i) m = std::max(m, at(p, i));
          for (int64_t i = 0; i < s.n; ++i) sum += std::exp(at(p, i) - m);
          const C lse = m + std::log(sum);
          for (int64_t i = 0; i < s.n; ++i) total -= at(t, i) * (at(p, i) - lse);
        } else {
          for (int64_t i = 0; i < s.n; ++i) sum += at(p, i);
          // With a finite, non-zero sum every clipped log is finite, so a zero label's term is
          // exactly 0 and can be skipped: one log per row for one-hot labels instead of one per
          // class (the same bits). Otherwise (inf or NaN around) every term runs, so NaN and inf
          // propagate exactly as before.
          const bool skip_zero_labels = std::isfinite(sum) && sum != 0;
          for (int64_t i = 0; i < s.n; ++i) {
            const C ti = at(t, i);
            if (skip_zero_labels && ti == 0) continue;
            total -= ti * std::log(clip(at(p, i) / sum));
          }
        }
        l[o * s.inner + in] = detail::store<T>(total);
      }
    }
  });
  return loss;
}

namespace {
void check_softmax_operands(const Tensor& y_true, const Tensor& logits, const Tensor& p,
                            const char* op) {
  check_pair(y_true, p, op);
  LOCKSTEP_CHECK(
      logits.shape() == p.shape() && logits.dtype() == p.dtype() && p.rank() == 2, op,
      ": expected logits and probabilities of one rank-2 shape and dtype. Received: logits ",
      logits.describe(), ", probabilities ", p.describe(), ".");
}
}  // namespace

// A classifier's loss over a short class axis, a block of rows at a time: the block's
// probabilities, logits and labels transposed into columns, so that each lane of a vector runs one
// row's loop below (the largest probability, the log-sum-exp, the sum over the labelled classes),
// with the row loop's operations in its order; the log stays std::log, one per row. The lanes are
// independent, so the blocking and the build's vector width change no bit.
constexpr int64_t kMaxShortClasses = 32;

LOCKSTEP_DISPATCHED_LANES(void, softmax_crossentropy_short_rows_f32,
                          (const float* __restrict t, const float* __restrict z,
                           const float* __restrict p, float* __restrict loss, int64_t rows,
                           int64_t n),
                          (t, z, p, loss, rows, n)) {
  constexpr int W = kFloatLanes;
  typedef float F __attribute__((vector_size(4 * W)));
  typedef int32_t I __attribute__((vector_size(4 * W)));
  alignas(64) float tt[kMaxShortClasses * W], tz[kMaxShortClasses * W], tp[kMaxShortClasses * W];
  alignas(64) float best_out[W], zj_out[W], zero_out[W], lse_in[W], total_out[W];
  for (int64_t r0 = 0; r0 < rows; r0 += W) {
    const int64_t count = std::min<int64_t>(W, rows - r0);
    // Padding lanes: probability 1, so their log is finite.
    ::lockstep::detail::rows_to_columns<W>(t + r0 * n, count, n, W, 1.0f, tt, (rows - r0) * n);
    ::lockstep::detail::rows_to_columns<W>(z + r0 * n, count, n, W, 1.0f, tz, (rows - r0) * n);
    ::lockstep::detail::rows_to_columns<W>(p + r0 * n, count, n, W, 1.0f, tp, (rows - r0) * n);
    F best, zj, finite_zero = F{} + 0.0f, v, zk;
    std::memcpy(&best, tp, sizeof best);
    std::memcpy(&zj, tz, sizeof zj);
    for (int64_t k = 0; k < n; ++k) {
      std::memcpy(&v, tp + k * W, sizeof v);
      std::memcpy(&zk, tz + k * W, sizeof zk);
      finite_zero += v * 0.0f;
      const I larger = v > best;
      best = larger ? v : best;
      zj = larger ? zk : zj;
    }
    std::memcpy(best_out, &best, sizeof best);
    std::memcpy(zj_out, &zj, sizeof zj);
    std::memcpy(zero_out, &finite_zero, sizeof finite_zero);
    for (int i = 0; i < W; ++i) lse_in[i] = zj_out[i] - std::log(best_out[i]);
    F lse, total = F{} + 0.0f, tk;
    std::memcpy(&lse, lse_in, sizeof lse);
    for (int64_t k = 0; k < n; ++k) {
      std::memcpy(&tk, tt + k * W, sizeof tk);
      std::memcpy(&zk, tz + k * W, sizeof zk);
      const F term = tk * (lse - zk);
      total = tk != 0.0f ? total + term : total;
    }
    std::memcpy(total_out, &total, sizeof total);
    for (int64_t i = 0; i < count; ++i) {
      loss[r0 + i] = zero_out[i] != 0.0f ? std::numeric_limits<float>::quiet_NaN() : total_out[i];
    }
  }
}

Tensor softmax_crossentropy_forward(const Tensor& y_true, const Tensor& logits, const Tensor& p) {
  const char* op = "softmax_crossentropy";
  check_softmax_operands(y_true, logits, p, op);
  const int64_t rows = p.dim(0), n = p.dim(1);
  Tensor loss(Shape{rows}, p.dtype());
  if (p.dtype() == DType::float32 && n >= 1 && n <= kMaxShortClasses) {
    softmax_crossentropy_short_rows_f32(y_true.data<float>(), logits.data<float>(), p.data<float>(),
                                        loss.data<float>(), rows, n);
    return loss;
  }
  with_type(p.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    const T* t = y_true.data<T>();
    const T* z = logits.data<T>();
    const T* pp = p.data<T>();
    T* l = loss.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const T* tr = t + r * n;
      const T* zr = z + r * n;
      const T* pr = pp + r * n;
      // Branch-free (selects, no data-dependent jumps: the largest probability moves between
      // classes from row to row): the first largest p_j, and Σ p_k · 0, which is zero exactly
      // when every p_k is finite (inf · 0 and NaN · 0 are NaN).
      int64_t j = 0;
      C best = n > 0 ? detail::load(pr[0]) : C(0), finite_zero = 0;
      for (int64_t k = 0; k < n; ++k) {
        const C v = detail::load(pr[k]);
        finite_zero += v * C(0);
        const bool larger = v > best;
        best = larger ? v : best;
        j = larger ? k : j;
      }
      if (n == 0 || finite_zero != C(0)) {
        l[r] = detail::store<T>(std::numeric_limits<C>::quiet_NaN());
        continue;
      }
      const C lse = detail::load(zr[j]) - std::log(best);
      C total = 0;
      for (int64_t k = 0; k < n; ++k) {
        // Classes without weight are skipped (a selected sum, not a branch): their logit may be
        // -inf, whose 0 · inf would be NaN.
        const C tk = detail::load(tr[k]);
        const C term = tk * (lse - detail::load(zr[k]));
        total = tk != C(0) ? total + term : total;
      }
      l[r] = detail::store<T>(total);
    }
  });
  return loss;
}

Tensor softmax_crossentropy_backward(const Tensor& dloss, const Tensor& y_true, const Tensor& p) {
  const char* op = "softmax_crossentropy_backward";
  check_pair(y_true, p, op);
  check_dloss(dloss, p, 1, op);
  const int64_t rows = p.dim(0), n = p.dim(1);
  Tensor dz(p.shape(), p.dtype());
  with_type(p.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    const T* t = y_true.data<T>();
    const T* pp = p.data<T>();
    const T* dl = dloss.data<T>();
    T* g = dz.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const C d = detail::load(dl[r]);
      C tsum = 0;
      for (int64_t k = 0; k < n; ++k) tsum += detail::load(t[r * n + k]);
      for (int64_t k = 0; k < n; ++k) {
        g[r * n + k] =
            detail::store<T>(d * (detail::load(pp[r * n + k]) * tsum - detail::load(t[r * n + k])));
      }
    }
  });
  return dz;
}

Tensor categorical_crossentropy_backward(const Tensor& dloss, const Tensor& y_true,
                                         const Tensor& y_pred, bool from_logits, int axis) {
  const char* op = "categorical_crossentropy_backward";
  check_pair(y_true, y_pred, op);
  const int ax = y_pred.shape().normalize_axis(axis);
  check_dloss(dloss, y_pred, ax, op);
  detail::AxisSplit s = detail::split_at_axis(y_pred.shape(), ax);
  Tensor dp(y_pred.shape(), y_pred.dtype());
  with_type(y_pred.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    const T* t = y_true.data<T>();
    const T* p = y_pred.data<T>();
    const T* dl = dloss.data<T>();
    T* g = dp.data<T>();
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t in = 0; in < s.inner; ++in) {
        const int64_t base = o * s.n * s.inner + in;
        const C d = detail::load(dl[o * s.inner + in]);
        auto at = [&](const T* v, int64_t i) { return detail::load(v[base + i * s.inner]); };
        auto put = [&](int64_t i, C v) { g[base + i * s.inner] = detail::store<T>(v); };
        if (from_logits) {
          C m = -std::numeric_limits<C>::infinity(), sum = 0, tsum = 0;
          for (int64_t i = 0; i < s.n; ++i) m = std::max(m, at(p, i));
          for (int64_t i = 0; i < s.n; ++i) sum += std::exp(at(p, i) - m), tsum += at(t, i);
          for (int64_t i = 0; i < s.n; ++i) {
            put(i, d * (std::exp(at(p, i) - m) / sum * tsum - at(t, i)));
          }
        } else {
          // q = p / Σp; dL/dq_i = −t_i / q_i inside the clip range, 0 outside;
          // dL/dp_j = (dL/dq_j − Σ_i dL/dq_i q_i) / Σp.
          C sum = 0, dot = 0;
          for (int64_t i = 0; i < s.n; ++i) sum += at(p, i);
          // For float32 and float64, q is kept in the output row between the two passes (one
          // division per entry instead of two); bfloat16 could not hold it exactly.
          constexpr bool keep_q = std::is_same_v<T, C>;
          for (int64_t i = 0; i < s.n; ++i) {
            C q = at(p, i) / sum;
            if constexpr (keep_q) g[base + i * s.inner] = q;
            if (inside_clip(q)) dot += -at(t, i);  // (−t/q)·q
          }
          for (int64_t i = 0; i < s.n; ++i) {
            C q;
            if constexpr (keep_q) {
              q = g[base + i * s.inner];
            } else {
              q = at(p, i) / sum;
            }
            const C ti = at(t, i);
            // −t/q is −t when t is ±0 (q > 0 inside the clip range): one-hot rows skip the
            // division for every zero label, with the same bits.
            C gq = inside_clip(q) ? (ti == 0 ? -ti : -ti / q) : C(0);
            put(i, d * (gq - dot) / sum);
          }
        }
      }
    }
  });
  return dp;
}

Tensor sparse_categorical_crossentropy_forward(const Tensor& labels, const Tensor& y_pred,
                                               bool from_logits) {
  const char* op = "sparse_categorical_crossentropy";
  check_labels(labels, y_pred, op);
  const int64_t classes = y_pred.dim(-1), rows = labels.num_elements();
  Tensor loss(labels.shape(), y_pred.dtype());
  with_type(y_pred.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    const T* p = y_pred.data<T>();
    T* l = loss.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = p + r * classes;
      const int64_t k = label_at(labels, r, classes, op);
      C v;
      if (from_logits) {
        C m = -std::numeric_limits<C>::infinity(), sum = 0;
        for (int64_t i = 0; i < classes; ++i) m = std::max(m, detail::load(row[i]));
        for (int64_t i = 0; i < classes; ++i) sum += std::exp(detail::load(row[i]) - m);
        v = m + std::log(sum) - detail::load(row[k]);
      } else {
        C sum = 0;
        for (int64_t i = 0; i < classes; ++i) sum += clip(detail::load(row[i]));
        v = std::log(sum) - std::log(clip(detail::load(row[k])));
      }
      l[r] = detail::store<T>(v);
    }
  });
  return loss;
}

Tensor sparse_categorical_crossentropy_backward(const Tensor& dloss, const Tensor& labels,
                                                const Tensor& y_pred, bool from_logits) {
  const char* op = "sparse_categorical_crossentropy_backward";
  check_labels(labels, y_pred, op);
  check_dloss(dloss, y_pred, -1, op);
  const int64_t classes = y_pred.dim(-1), rows = labels.num_elements();
  Tensor dp(y_pred.shape(), y_pred.dtype());
  with_type(y_pred.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    const T* p = y_pred.data<T>();
    const T* dl = dloss.data<T>();
    T* g = dp.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = p + r * classes;
      T* grow = g + r * classes;
      const int64_t k = label_at(labels, r, classes, op);
      const C d = detail::load(dl[r]);
      if (from_logits) {
        C m = -std::numeric_limits<C>::infinity(), sum = 0;
        for (int64_t i = 0; i < classes; ++i) m = std::max(m, detail::load(row[i]));
        for (int64_t i = 0; i < classes; ++i) sum += std::exp(detail::load(row[i]) - m);
        for (int64_t i = 0; i < classes; ++i) {
          C sm = std::exp(detail::load(row[i]) - m) / sum;
          grow[i] = detail::store<T>(d * (sm - (i == k ? C(1) : C(0))));
        }
      } else {
        C sum = 0;
        for (int64_t i = 0; i < classes; ++i) sum += clip(detail::load(row[i]));
        for (int64_t i = 0; i < classes; ++i) {
          C v = detail::load(row[i]);
          C gi = inside_clip(v) ? C(1) / sum - (i == k ? C(1) / v : C(0)) : C(0);
          grow[i] = detail::store<T>(d * gi);
        }
      }
    }
  });
  return dp;
}

namespace {

// Binary cross-entropy and the regression losses share one shape: a per-element term of
// (y_true, y_pred), summed per row of the last axis in the compute type and then divided by k.
// These helpers own that loop (and its checks) so each loss only states its term; the order of
// operations is the one every loss used before, so results stay bit-identical.
template <typename Term>
Tensor mean_over_last_axis(const Tensor& y_true, const Tensor& y_pred, const char* op, Term term) {
  check_pair(y_true, y_pred, op);
  const int64_t k = y_pred.dim(-1), rows = y_pred.num_elements() / std::max<int64_t>(k, 1);
  Tensor loss(y_pred.shape().without(-1), y_pred.dtype());
  with_type(y_pred.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    const T* t = y_true.data<T>();
    const T* p = y_pred.data<T>();
    T* l = loss.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      C total = 0;
      for (int64_t i = r * k; i < (r + 1) * k; ++i) {
        const C y = detail::load(t[i]), z = detail::load(p[i]);
        total += term(y, z);
      }
      l[r] = detail::store<T>(total / static_cast<C>(k));
    }
  });
  return loss;
}

// Backward of mean_over_last_axis: dy_pred[i] = dloss[row] / k * dterm(y_true[i], y_pred[i]).
// With WITH_DY_TRUE (the regression losses, whose term depends on y_pred - y_true) it also
// writes dy_true[i] as the negation; otherwise dy_true stays undefined.
template <bool WITH_DY_TRUE, typename DTerm>
RegressionLossGrads mean_over_last_axis_backward(const Tensor& dloss, const Tensor& y_true,
                                                 const Tensor& y_pred, const char* op,
                                                 DTerm dterm) {
  check_pair(y_true, y_pred, op);
  check_dloss(dloss, y_pred, -1, op);
  const int64_t k = y_pred.dim(-1), rows = y_pred.num_elements() / std::max<int64_t>(k, 1);
  RegressionLossGrads g;
  if constexpr (WITH_DY_TRUE) g.dy_true = Tensor(y_true.shape(), y_true.dtype());
  g.dy_pred = Tensor(y_pred.shape(), y_pred.dtype());
  with_type(y_pred.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    const T* t = y_true.data<T>();
    const T* p = y_pred.data<T>();
    const T* dl = dloss.data<T>();
    T* gp = g.dy_pred.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const C d = detail::load(dl[r]) / static_cast<C>(k);
      for (int64_t i = r * k; i < (r + 1) * k; ++i) {
        const C y = detail::load(t[i]), z = detail::load(p[i]);
        const C du = dterm(y, z);
        gp[i] = detail::store<T>(d * du);
        if constexpr (WITH_DY_TRUE) g.dy_true.data<T>()[i] = detail::store<T>(-d * du);
      }
    }
  });
  return g;
}

// Per-element terms and their derivatives with respect to y_pred; y is y_true, z is y_pred.
constexpr auto kBceLogitsTerm = [](auto y, auto z) {
  using C = decltype(z);
  return std::max(z, C(0)) - z * y + std::log1p(std::exp(-std::abs(z)));
};
constexpr auto kBceTerm = [](auto y, auto z) {
  const auto pc = clip(z);
  return -(y * std::log(pc) + (1 - y) * std::log(1 - pc));
};
constexpr auto kBceLogitsGrad = [](auto y, auto z) {
  using C = decltype(z);
  return C(1) / (C(1) + std::exp(-z)) - y;
};
constexpr auto kBceGrad = [](auto y, auto z) {
  using C = decltype(z);
  return inside_clip(z) ? -y / z + (1 - y) / (1 - z) : C(0);
};
constexpr auto kSquaredTerm = [](auto y, auto z) {
  const auto u = z - y;
  return u * u;
};
constexpr auto kAbsoluteTerm = [](auto y, auto z) { return std::abs(z - y); };
constexpr auto kSquaredGrad = [](auto y, auto z) { return 2 * (z - y); };
constexpr auto kAbsoluteGrad = [](auto y, auto z) {
  using C = decltype(z);
  const C u = z - y;
  return u > 0 ? C(1) : (u < 0 ? C(-1) : C(0));
};

}  // namespace

Tensor binary_crossentropy_forward(const Tensor& y_true, const Tensor& y_pred, bool from_logits) {
  const char* op = "binary_crossentropy";
  return from_logits ? mean_over_last_axis(y_true, y_pred, op, kBceLogitsTerm)
                     : mean_over_last_axis(y_true, y_pred, op, kBceTerm);
}

Tensor binary_crossentropy_backward(const Tensor& dloss, const Tensor& y_true, const Tensor& y_pred,
                                    bool from_logits) {
  const char* op = "binary_crossentropy_backward";
  return (from_logits
              ? mean_over_last_axis_backward<false>(dloss, y_true, y_pred, op, kBceLogitsGrad)
              : mean_over_last_axis_backward<false>(dloss, y_true, y_pred, op, kBceGrad))
      .dy_pred;
}

Tensor mean_squared_error_forward(const Tensor& y_true, const Tensor& y_pred) {
  return mean_over_last_axis(y_true, y_pred, "mean_squared_error", kSquaredTerm);
}
RegressionLossGrads mean_squared_error_backward(const Tensor& dloss, const Tensor& y_true,
                                                const Tensor& y_pred) {
  return mean_over_last_axis_backward<true>(dloss, y_true, y_pred, "mean_squared_error_backward",
                                            kSquaredGrad);
}
Tensor mean_absolute_error_forward(const Tensor& y_true, const Tensor& y_pred) {
  return mean_over_last_axis(y_true, y_pred, "mean_absolute_error", kAbsoluteTerm);
}
RegressionLossGrads mean_absolute_error_backward(const Tensor& dloss, const Tensor& y_true,
                                                 const Tensor& y_pred) {
  return mean_over_last_axis_backward<true>(dloss, y_true, y_pred, "mean_absolute_error_backward",
                                            kAbsoluteGrad);
}

}  // namespace lockstep::ops
