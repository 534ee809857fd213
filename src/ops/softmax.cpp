#include "lockstep/ops/softmax.h"
#include "lockstep/core/check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "column_softmax.h"
#include "core/cpu_dispatch.h"
#include "core/rows_to_columns.h"
#include "internal.h"
#include "kernel_util.h"
#include "onednn.h"

namespace lockstep::ops {
namespace {

template <bool LOG>
void softmax_f64(const Tensor& x, const Tensor& y, int axis) {
  detail::AxisSplit s = detail::split_at_axis(x.shape(), axis);
  const double* px = x.data<double>();
  double* py = y.data<double>();
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t in = 0; in < s.inner; ++in) {
      const int64_t base = o * s.n * s.inner + in;
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < s.n; ++i) m = std::max(m, px[base + i * s.inner]);
      double sum = 0;
      for (int64_t i = 0; i < s.n; ++i) sum += std::exp(px[base + i * s.inner] - m);
      const double log_sum = std::log(sum);
      for (int64_t i = 0; i < s.n; ++i) {
        double v = px[base + i * s.inner] - m;
        py[base + i * s.inner] = LOG ? v - log_sum : std::exp(v) / sum;
      }
    }
  }
}

// A classifier's softmax: a short last axis (its classes) of many rows. oneDNN's kernel runs along
// a row, which for ten classes leaves most of each vector empty, and costs more to call than to
// compute; here a block of rows is transposed into columns so that each lane of a vector holds
// one row's softmax (column_softmax.h), then transposed back. The lanes are independent, so the
// blocking and the build's vector width change no bit.
constexpr int64_t kMaxShortAxis = 32;

LOCKSTEP_DISPATCHED_LANES(void, softmax_short_rows_f32,
                          (const float* __restrict x, float* __restrict y, int64_t rows, int64_t n),
                          (x, y, rows, n)) {
  constexpr int W = kFloatLanes;
  constexpr int64_t kBlock = 4 * W;
  alignas(64) float t[kMaxShortAxis * kBlock];
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
    const int64_t count = std::min(kBlock, rows - r0), ld = (count + W - 1) / W * W;
    ::lockstep::detail::rows_to_columns<W>(x + r0 * n, count, n, ld, 0.0f, t, (rows - r0) * n);
    column_softmax::softmax_columns<W>(t, n, ld, nullptr);
    ::lockstep::detail::columns_to_rows<W>(t, ld, count, n, y + r0 * n, (rows - r0) * n);
  }
}

template <bool LOG>
Tensor softmax_forward(const Tensor& x, int axis, const char* op) {
  detail::check_floating(x, op, "x");
  LOCKSTEP_CHECK(x.rank() != 0, op, ": expected a tensor of rank >= 1. Received: ", x.describe(),
                 ".");
  const int ax = x.shape().normalize_axis(axis);
  Tensor y(x.shape(), x.dtype());
  if (x.num_elements() == 0) return y;
  if (x.dtype() == DType::float64) {
    softmax_f64<LOG>(x, y, ax);
    return y;
  }
  if (detail::emulates_bf16(x.dtype())) {
    return detail::narrow_to_bf16(softmax_forward<LOG>(detail::widen_to_f32(x), axis, op));
  }
  const int64_t n = x.dim(ax);
  if (!LOG && x.dtype() == DType::float32 && ax == x.rank() - 1 && n <= kMaxShortAxis) {
    softmax_short_rows_f32(x.data<float>(), y.data<float>(), x.num_elements() / n, n);
    return y;
  }
  onednn::Key key(LOG ? "log_softmax" : "softmax");
  key.add(x.shape()).add(x.dtype()).add(ax);
  auto& prim = onednn::cached<onednn::Primitive>(key, [&] {
    auto md = onednn::plain_desc(x.shape(), x.dtype());
    if constexpr (LOG) {
      dnnl::logsoftmax_forward::primitive_desc pd(
          dnnl::logsoftmax_forward::desc(dnnl::prop_kind::forward_inference, md, ax),
          onednn::engine());
      return onednn::Primitive(dnnl::logsoftmax_forward(pd),
                               {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}});
    } else {
      dnnl::softmax_forward::primitive_desc pd(
          dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, md, ax),
          onednn::engine());
      return onednn::Primitive(dnnl::softmax_forward(pd), {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}});
    }
  });
  prim.execute({{DNNL_ARG_SRC, x.raw_data()}, {DNNL_ARG_DST, y.raw_data()}});
  return y;
}

template <bool LOG>
Tensor softmax_grad(const Tensor& dy, const Tensor& y, int axis, const char* op) {
  detail::check_floating(dy, op, "dy");
  detail::check_defined(y, op, "y");
  detail::check_same_dtype(dy, y, op);
  detail::check_same_shape(dy, y, op);
  detail::AxisSplit s = detail::split_at_axis(y.shape(), axis);
  Tensor dx(y.shape(), y.dtype());
  detail::dispatch_floating(y.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    const T* pd = dy.data<T>();
    const T* py = y.data<T>();
    T* px = dx.data<T>();
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t in = 0; in < s.inner; ++in) {
        const int64_t base = o * s.n * s.inner + in;
        C dot = 0;
        for (int64_t i = 0; i < s.n; ++i) {
          const int64_t k = base + i * s.inner;
          dot += LOG ? detail::load(pd[k]) : detail::load(pd[k]) * detail::load(py[k]);
        }
        for (int64_t i = 0; i < s.n; ++i) {
          const int64_t k = base + i * s.inner;
          C g = LOG ? detail::load(pd[k]) - std::exp(detail::load(py[k])) * dot
                    : detail::load(py[k]) * (detail::load(pd[k]) - dot);
          px[k] = detail::store<T>(g);
        }
      }
    }
  });
  return dx;
}

}  // namespace

Tensor softmax_forward(const Tensor& x, int axis) {
  return softmax_forward<false>(x, axis, "softmax");
}
Tensor softmax_backward(const Tensor& dy, const Tensor& y, int axis) {
  return softmax_grad<false>(dy, y, axis, "softmax_backward");
}
Tensor log_softmax_forward(const Tensor& x, int axis) {
  return softmax_forward<true>(x, axis, "log_softmax");
}
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y, int axis) {
  return softmax_grad<true>(dy, y, axis, "log_softmax_backward");
}

}  // namespace lockstep::ops
