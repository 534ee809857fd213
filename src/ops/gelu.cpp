#include "lockstep/ops/gelu.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "lockstep/core/bfloat16.h"
#include "lockstep/ops/activations.h"

#include "gelu_kernels.h"
#include "internal.h"
#include "kernel_util.h"
#include "onednn.h"

namespace lockstep::ops {
namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kCubic = 0.044715;

double gelu_value(double x, bool approximate) {
  if (approximate) {
    const double u = kSqrt2OverPi * (x + kCubic * x * x * x);
    return 0.5 * x * (1.0 + std::tanh(u));
  }
  return 0.5 * x * (1.0 + std::erf(x * M_SQRT1_2));
}

double gelu_derivative(double x, bool approximate) {
  if (approximate) {
    const double th = std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x));
    return 0.5 * (1.0 + th) +
           0.5 * x * (1.0 - th * th) * kSqrt2OverPi * (1.0 + 3.0 * kCubic * x * x);
  }
  return 0.5 * (1.0 + std::erf(x * M_SQRT1_2)) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
}

dnnl::algorithm algorithm(bool approximate) {
  return approximate ? dnnl::algorithm::eltwise_gelu_tanh : dnnl::algorithm::eltwise_gelu_erf;
}

dnnl::eltwise_forward::primitive_desc forward_pd(const dnnl::memory::desc& md, bool approximate) {
  return dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, algorithm(approximate), md,
                                  0.0f, 0.0f),
      onednn::engine());
}

// dx from x and dy over n elements of one dtype.
onednn::Primitive& backward_primitive(int64_t n, DType dtype, bool approximate) {
  onednn::Key key("gelu_backward");
  key.add(approximate).add(n).add(dtype);
  return onednn::cached<onednn::Primitive>(key, [&] {
    auto md = onednn::plain_desc(dnnl::memory::dims{n}, dtype);
    dnnl::eltwise_backward::primitive_desc pd(
        dnnl::eltwise_backward::desc(algorithm(approximate), md, md, 0.0f, 0.0f), onednn::engine(),
        forward_pd(md, approximate));
    return onednn::Primitive(
        dnnl::eltwise_backward(pd),
        {{DNNL_ARG_SRC, md}, {DNNL_ARG_DIFF_DST, md}, {DNNL_ARG_DIFF_SRC, md}});
  });
}

}  // namespace

namespace detail {

Tensor gelu_forward(const Tensor& x, bool approximate) {
  detail::check_floating(x, approximate ? "gelu_tanh" : "gelu", "x");
  Tensor y(x.shape(), x.dtype());
  const int64_t n = x.num_elements();
  if (n == 0) return y;
  if (x.dtype() == DType::float64) {
    const double* xs = x.data<double>();
    double* ys = y.data<double>();
    for (int64_t i = 0; i < n; ++i) ys[i] = gelu_value(xs[i], approximate);
    return y;
  }
  if (detail::emulates_bf16(x.dtype())) {
    return detail::narrow_to_bf16(gelu_forward(detail::widen_to_f32(x), approximate));
  }
  onednn::Key key("gelu");
  key.add(approximate).add(n).add(x.dtype());
  auto& prim = onednn::cached<onednn::Primitive>(key, [&] {
    auto md = onednn::plain_desc(dnnl::memory::dims{n}, x.dtype());
    return onednn::Primitive(dnnl::eltwise_forward(forward_pd(md, approximate)),
                             {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}});
  });
  prim.execute({{DNNL_ARG_SRC, x.raw_data()}, {DNNL_ARG_DST, y.raw_data()}});
  return y;
}

void gelu_backward_into(const Tensor& dy, const Tensor& x, const Tensor& dx, bool approximate) {
  const char* op = approximate ? "gelu_tanh_backward" : "gelu_backward";
  detail::check_floating(dy, op, "dy");
  detail::check_floating(x, op, "x");
  detail::check_same_dtype(dy, x, op);
  detail::check_same_shape(dy, x, op);
  detail::check_same_dtype(dy, dx, op);
  detail::check_same_shape(dy, dx, op);
  const int64_t n = dy.num_elements();
  if (n == 0) return;
  if (dy.dtype() == DType::float64) {
    const double* d = dy.data<double>();
    const double* xs = x.data<double>();
    double* out = dx.data<double>();
    for (int64_t i = 0; i < n; ++i) out[i] = d[i] * gelu_derivative(xs[i], approximate);
    return;
  }
  if (detail::emulates_bf16(dy.dtype())) {
    Tensor dx32(dx.shape(), DType::float32);
    gelu_backward_into(detail::widen_to_f32(dy), detail::widen_to_f32(x), dx32, approximate);
    float_to_bfloat16(dx32.data<float>(), dx.data<bfloat16>(), static_cast<size_t>(n));
    return;
  }
  auto& prim = backward_primitive(n, dy.dtype(), approximate);
  // dx may alias dy (linear's backward passes one buffer): oneDNN then gets a copy of dy.
  const Tensor upstream = dx.raw_data() == dy.raw_data() ? dy.clone() : dy;
  prim.execute({{DNNL_ARG_SRC, x.raw_data()},
                {DNNL_ARG_DIFF_DST, upstream.raw_data()},
                {DNNL_ARG_DIFF_SRC, dx.raw_data()}});
}

Tensor gelu_backward(const Tensor& dy, const Tensor& x, bool approximate) {
  detail::check_defined(dy, approximate ? "gelu_tanh_backward" : "gelu_backward", "dy");
  Tensor dx(dy.shape(), dy.dtype());
  gelu_backward_into(dy, x, dx, approximate);
  return dx;
}

}  // namespace detail

namespace {

// Elements per chunk of the rounding forms: the chunk's input, output and rounded gradient stay
// in the core's L2 between oneDNN's pass and the rounding.
constexpr int64_t kRoundingChunk = 32 * 1024;

// The exact gelu over n float32 elements, as ops::gelu_forward's eltwise primitive computes it.
onednn::Primitive& exact_forward(int64_t n) {
  onednn::Key key("gelu_inference");
  key.add(n);
  return onednn::cached<onednn::Primitive>(key, [&] {
    auto md = onednn::plain_desc(dnnl::memory::dims{n}, DType::float32);
    dnnl::eltwise_forward::primitive_desc pd(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference,
                                    dnnl::algorithm::eltwise_gelu_erf, md, 0.0f, 0.0f),
        onednn::engine());
    return onednn::Primitive(dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}});
  });
}

}  // namespace

void detail::gelu_to_bfloat16_values_into(const float* z, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += kRoundingChunk) {
    const int64_t m = std::min(kRoundingChunk, n - i);
    exact_forward(m).execute({{DNNL_ARG_SRC, z + i}, {DNNL_ARG_DST, y + i}});
    round_to_bfloat16_values(y + i, y + i, static_cast<size_t>(m));
  }
}

Tensor gelu_to_bfloat16_values_forward(const Tensor& x) {
  detail::check_float32(x, "gelu_to_bfloat16_values", "x");
  Tensor y(x.shape(), DType::float32);
  detail::gelu_to_bfloat16_values_into(x.data<float>(), y.data<float>(), x.num_elements());
  y.mark_bfloat16_values();
  return y;
}

Tensor gelu_to_bfloat16_values_backward(const Tensor& dy, const Tensor& x) {
  const char* op = "gelu_to_bfloat16_values_backward";
  detail::check_float32(dy, op, "dy");
  detail::check_float32(x, op, "x");
  detail::check_same_shape(dy, x, op);
  Tensor dx(x.shape(), DType::float32);
  const int64_t n = x.num_elements();
  const bool rounded = dy.holds_bfloat16_values();
  thread_local std::vector<float> chunk;
  if (!rounded) chunk.resize(static_cast<size_t>(std::min(kRoundingChunk, n)));
  const float* d = dy.data<float>();
  for (int64_t i = 0; i < n; i += kRoundingChunk) {
    const int64_t m = std::min(kRoundingChunk, n - i);
    const float* upstream = d + i;
    if (!rounded) {
      round_to_bfloat16_values(upstream, chunk.data(), static_cast<size_t>(m));
      upstream = chunk.data();
    }
    backward_primitive(m, DType::float32, false)
        .execute({{DNNL_ARG_SRC, x.data<float>() + i},
                  {DNNL_ARG_DIFF_DST, upstream},
                  {DNNL_ARG_DIFF_SRC, dx.data<float>() + i}});
  }
  return dx;
}

Tensor gelu_tanh_forward(const Tensor& x) {
  return detail::gelu_forward(x, true);
}
Tensor gelu_tanh_backward(const Tensor& dy, const Tensor& x) {
  return detail::gelu_backward(dy, x, true);
}

}  // namespace lockstep::ops
