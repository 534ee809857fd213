#include "lockstep/ops/reduce.h"
#include "lockstep/core/check.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "core/cpu_dispatch.h"
#include "internal.h"
#include "kernel_util.h"

namespace lockstep::ops {
namespace {

std::string axes_string(const std::vector<int>& axes) {
  std::string s = "[";
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", " : "") + std::to_string(axes[i]);
  return s + "]";
}

// The input shape with reduced dimensions set to 1.
Shape kept_shape(const Shape& x, const std::vector<int>& axes, const char* op) {
  Shape k = x;
  if (axes.empty()) {
    for (int d = 0; d < x.rank(); ++d) k[d] = 1;
    return k;
  }
  std::vector<bool> seen(static_cast<size_t>(x.rank()), false);
  for (int a : axes) {
    LOCKSTEP_CHECK(a >= -x.rank() && a < x.rank(), op, ": axes ", axes_string(axes),
                   " out of range for shape ", x.to_string(), ".");
    int n = a < 0 ? a + x.rank() : a;
    LOCKSTEP_CHECK(!seen[static_cast<size_t>(n)], op, ": axes ", axes_string(axes),
                   " repeat a dimension of shape ", x.to_string(), ".");
    seen[static_cast<size_t>(n)] = true;
    k[n] = 1;
  }
  return k;
}

Shape final_shape(const Shape& x, const Shape& kept, const std::vector<int>& axes, bool keepdims) {
  if (keepdims) return kept;
  Shape out;
  for (int d = 0; d < x.rank(); ++d) {
    bool reduced = axes.empty();
    for (int a : axes) reduced = reduced || (a < 0 ? a + x.rank() : a) == d;
    if (!reduced) out.push_back(x[d]);
  }
  return out;
}

enum class Kind { sum, max };

template <Kind K>
Tensor reduce(const Tensor& x, const std::vector<int>& axes, bool keepdims, const char* op,
              double post_scale) {
  detail::check_floating(x, op, "x");
  Shape kept = kept_shape(x.shape(), axes, op);
  Tensor y(kept, x.dtype());
  detail::dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    Tensor acc(kept, std::is_same_v<C, double> ? DType::float64 : DType::float32);
    C* pa = acc.data<C>();
    const C init = K == Kind::sum ? C(0) : -std::numeric_limits<C>::infinity();
    for (int64_t i = 0; i < acc.num_elements(); ++i) pa[i] = init;
    const T* px = x.data<T>();
    detail::BroadcastWalk<1> walk(x.shape(), {kept});
    walk.for_each_run([&](const std::array<int64_t, 1>& off, const std::array<int64_t, 1>& st,
                          int64_t o, int64_t n) {
      C* dst = pa + off[0];
      if (st[0] == 1) {
        for (int64_t j = 0; j < n; ++j) {
          C v = detail::load(px[o + j]);
          dst[j] = K == Kind::sum ? dst[j] + v : std::max(dst[j], v);
        }
      } else {
        C s = dst[0];
        for (int64_t j = 0; j < n; ++j) {
          C v = detail::load(px[o + j]);
          s = K == Kind::sum ? s + v : std::max(s, v);
        }
        dst[0] = s;
      }
    });
    T* py = y.data<T>();
    const C sc = static_cast<C>(post_scale);
    for (int64_t i = 0; i < y.num_elements(); ++i) py[i] = detail::store<T>(pa[i] * sc);
  });
  return y.reshape(final_shape(x.shape(), kept, axes, keepdims));
}

int64_t reduced_count(const Shape& x, const Shape& kept) {
  int64_t kn = kept.num_elements();
  return kn == 0 ? 0 : x.num_elements() / kn;
}

// dx = broadcast(dy) · c
Tensor broadcast_back(const Tensor& dy, const Shape& x_shape, const std::vector<int>& axes,
                      bool keepdims, double c, const char* op) {
  detail::check_floating(dy, op, "dy");
  Shape kept = kept_shape(x_shape, axes, op);
  Shape expected = final_shape(x_shape, kept, axes, keepdims);
  LOCKSTEP_CHECK(dy.shape() == expected, op, ": expected dy of shape ", expected.to_string(),
                 " for x of shape ", x_shape, ". Received: ", dy.describe(), ".");
  Tensor dx(x_shape, dy.dtype());
  detail::dispatch_floating(dy.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    const T* pd = dy.data<T>();
    T* px = dx.data<T>();
    const C cc = static_cast<C>(c);
    detail::BroadcastWalk<1> walk(x_shape, {kept});
    walk.for_each_run([&](const std::array<int64_t, 1>& off, const std::array<int64_t, 1>& st,
                          int64_t o, int64_t n) {
      for (int64_t j = 0; j < n; ++j)
        px[o + j] = detail::store<T>(cc * detail::load(pd[off[0] + j * st[0]]));
    });
  });
  return dx;
}

}  // namespace

Shape reduced_shape(const Shape& x_shape, const std::vector<int>& axes, bool keepdims) {
  return final_shape(x_shape, kept_shape(x_shape, axes, "reduced_shape"), axes, keepdims);
}

Tensor reduce_sum_forward(const Tensor& x, const std::vector<int>& axes, bool keepdims) {
  return reduce<Kind::sum>(x, axes, keepdims, "reduce_sum", 1.0);
}

Tensor reduce_mean_forward(const Tensor& x, const std::vector<int>& axes, bool keepdims) {
  detail::check_floating(x, "reduce_mean", "x");
  int64_t n = reduced_count(x.shape(), kept_shape(x.shape(), axes, "reduce_mean"));
  return reduce<Kind::sum>(x, axes, keepdims, "reduce_mean", 1.0 / static_cast<double>(n));
}

Tensor reduce_max_forward(const Tensor& x, const std::vector<int>& axes, bool keepdims) {
  return reduce<Kind::max>(x, axes, keepdims, "reduce_max", 1.0);
}

Tensor reduce_sum_backward(const Tensor& dy, const Shape& x_shape, const std::vector<int>& axes,
                           bool keepdims) {
  return broadcast_back(dy, x_shape, axes, keepdims, 1.0, "reduce_sum_backward");
}

Tensor reduce_mean_backward(const Tensor& dy, const Shape& x_shape, const std::vector<int>& axes,
                            bool keepdims) {
  int64_t n = reduced_count(x_shape, kept_shape(x_shape, axes, "reduce_mean_backward"));
  return broadcast_back(dy, x_shape, axes, keepdims, 1.0 / static_cast<double>(n),
                        "reduce_mean_backward");
}

Tensor reduce_max_backward(const Tensor& dy, const Tensor& x, const Tensor& y,
                           const std::vector<int>& axes, bool keepdims) {
  const char* op = "reduce_max_backward";
  detail::check_floating(x, op, "x");
  detail::check_same_dtype(dy, x, op);
  detail::check_same_dtype(y, x, op);
  Shape kept = kept_shape(x.shape(), axes, op);
  LOCKSTEP_CHECK(
      y.num_elements() == kept.num_elements() && dy.num_elements() == kept.num_elements(), op,
      ": expected y and dy of shape ", final_shape(x.shape(), kept, axes, keepdims).to_string(),
      " for x ", x.describe(), ". Received: y ", y.describe(), " and dy ", dy.describe(), ".");
  Tensor dx(x.shape(), x.dtype());
  detail::dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    const T* px = x.data<T>();
    const T* py = y.data<T>();
    const T* pd = dy.data<T>();
    T* pdx = dx.data<T>();
    Tensor ties = Tensor::zeros(kept, std::is_same_v<C, double> ? DType::float64 : DType::float32);
    C* pt = ties.data<C>();
    detail::BroadcastWalk<1> walk(x.shape(), {kept});
    walk.for_each_run([&](const std::array<int64_t, 1>& off, const std::array<int64_t, 1>& st,
                          int64_t o, int64_t n) {
      for (int64_t j = 0; j < n; ++j) {
        int64_t k = off[0] + j * st[0];
        if (detail::load(px[o + j]) == detail::load(py[k])) pt[k] += C(1);
      }
    });
    walk.for_each_run([&](const std::array<int64_t, 1>& off, const std::array<int64_t, 1>& st,
                          int64_t o, int64_t n) {
      for (int64_t j = 0; j < n; ++j) {
        int64_t k = off[0] + j * st[0];
        bool is_max = detail::load(px[o + j]) == detail::load(py[k]);
        pdx[o + j] = detail::store<T>(is_max ? detail::load(pd[k]) / pt[k] : C(0));
      }
    });
  });
  return dx;
}

namespace detail {
namespace {

// acc[j] += Σ_i x[i, j], row after row: each column's sum in the order of the rows, so the ISA
// builds (which vectorise across columns) give the same bits.
LOCKSTEP_DISPATCHED(void, add_rows, (const float* x, int64_t rows, int64_t cols, float* acc),
                    (x, rows, cols, acc)) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* __restrict row = x + i * cols;
    float* __restrict a = acc;
    for (int64_t j = 0; j < cols; ++j) a[j] += row[j];
  }
}
LOCKSTEP_DISPATCHED(void, add_rows, (const bfloat16* x, int64_t rows, int64_t cols, float* acc),
                    (x, rows, cols, acc)) {
  const auto* bits = reinterpret_cast<const uint16_t*>(x);
  for (int64_t i = 0; i < rows; ++i) {
    const uint16_t* __restrict row = bits + i * cols;
    float* __restrict a = acc;
    for (int64_t j = 0; j < cols; ++j) {
      const uint32_t u = static_cast<uint32_t>(row[j]) << 16;  // the bfloat16's float value
      float v;
      std::memcpy(&v, &u, sizeof v);
      a[j] += v;
    }
  }
}

}  // namespace

void column_sums_into(const Tensor& x, const Tensor& out) {
  const int64_t rows = x.dim(0), cols = x.dim(1);
  dispatch_floating(x.dtype(), "column_sums", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* px = x.data<T>();
    const bool direct = out.dtype() == dtype_v<C>;
    Tensor acc = direct ? out : Tensor(Shape{cols}, dtype_v<C>);
    C* pa = acc.data<C>();
    for (int64_t j = 0; j < cols; ++j) pa[j] = C(0);
    if constexpr (std::is_same_v<T, double>) {
      for (int64_t i = 0; i < rows; ++i) {
        const T* row = px + i * cols;
        for (int64_t j = 0; j < cols; ++j) pa[j] += load(row[j]);
      }
    } else {
      add_rows(px, rows, cols, pa);
    }
    if (!direct) {
      dispatch_floating(out.dtype(), "column_sums", [&](auto otag) {
        using O = decltype(otag);
        O* po = out.data<O>();
        for (int64_t j = 0; j < cols; ++j) po[j] = store<O>(static_cast<compute_t<O>>(pa[j]));
      });
    }
  });
}

}  // namespace detail

}  // namespace lockstep::ops
