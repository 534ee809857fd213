#include "lockstep/ops/activations.h"

#include "core/cpu_dispatch.h"

#include <cmath>
#include <string>

#include "gelu_kernels.h"
#include "internal.h"
#include "kernel_util.h"
#include "onednn.h"

namespace lockstep::ops {
namespace {

enum class Unary { neg, exp, log, sqrt, square, relu, sigmoid, tanh, gelu };

template <typename C>
C unary_value(Unary u, C x) {
  switch (u) {
    case Unary::neg:
      return -x;
    case Unary::exp:
      return std::exp(x);
    case Unary::log:
      return std::log(x);
    case Unary::sqrt:
      return std::sqrt(x);
    case Unary::square:
      return x * x;
    case Unary::relu:
      return x > C(0) ? x : C(0);
    case Unary::sigmoid:
      return C(1) / (C(1) + std::exp(-x));
    case Unary::tanh:
      return std::tanh(x);
    case Unary::gelu:
      return C(0.5) * x * (C(1) + std::erf(x * C(M_SQRT1_2)));
  }
  return x;
}

dnnl::algorithm algorithm_of(Unary u, float& alpha) {
  alpha = 0.0f;
  switch (u) {
    case Unary::neg:
      alpha = -1.0f;
      return dnnl::algorithm::eltwise_linear;
    case Unary::exp:
      return dnnl::algorithm::eltwise_exp;
    case Unary::log:
      return dnnl::algorithm::eltwise_log;
    case Unary::sqrt:
      return dnnl::algorithm::eltwise_sqrt;
    case Unary::square:
      return dnnl::algorithm::eltwise_square;
    case Unary::relu:
      return dnnl::algorithm::eltwise_relu;
    case Unary::sigmoid:
      return dnnl::algorithm::eltwise_logistic;
    case Unary::tanh:
      return dnnl::algorithm::eltwise_tanh;
    case Unary::gelu:
      return dnnl::algorithm::eltwise_gelu_erf;
  }
  return dnnl::algorithm::undef;
}

Tensor unary(Unary u, const Tensor& x, const char* op) {
  detail::check_floating(x, op, "x");
  Tensor y(x.shape(), x.dtype());
  const int64_t n = x.num_elements();
  if (n == 0) return y;
  if (x.dtype() == DType::float64) {
    const double* xs = x.data<double>();
    double* ys = y.data<double>();
    for (int64_t i = 0; i < n; ++i) ys[i] = unary_value(u, xs[i]);
    return y;
  }
  if (detail::emulates_bf16(x.dtype())) {
    return detail::narrow_to_bf16(unary(u, detail::widen_to_f32(x), op));
  }
  onednn::Key key("eltwise");
  key.add(static_cast<int>(u)).add(n).add(x.dtype());
  auto& prim = onednn::cached<onednn::Primitive>(key, [&] {
    float alpha;
    dnnl::algorithm alg = algorithm_of(u, alpha);
    auto md = onednn::plain_desc(dnnl::memory::dims{n}, x.dtype());
    dnnl::eltwise_forward::primitive_desc pd(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, alg, md, alpha, 0.0f),
        onednn::engine());
    return onednn::Primitive(dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}});
  });
  prim.execute({{DNNL_ARG_SRC, x.raw_data()}, {DNNL_ARG_DST, y.raw_data()}});
  return y;
}

// dx[i] = dy[i] · g(s[i]) where s is the saved tensor (x or y).
// float32 relu and its gradient, built for AVX-512 too: these passes over a conv layer's output
// (millions of elements per step) are memory-bound, and the wider builds halve the instructions.
// Same arithmetic as the generic loops: y = x < 0 ? 0 : x keeps NaN; dx = dy * (y > 0 ? 1 : 0).
LOCKSTEP_DISPATCHED(void, relu_f32, (const float* __restrict x, float* __restrict y, int64_t n),
                    (x, y, n)) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}
LOCKSTEP_DISPATCHED(void, relu_grad_f32,
                    (const float* __restrict dy, const float* __restrict y, float* __restrict dx,
                     int64_t n),
                    (dy, y, dx, n)) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * detail::positive_mask(y[i]);
}

template <typename G>
void grad_into(const Tensor& dy, const Tensor& saved, const Tensor& dx, const char* op, G g) {
  detail::check_floating(dy, op, "dy");
  detail::check_defined(saved, op, "saved input/output");
  detail::check_same_dtype(dy, saved, op);
  detail::check_same_shape(dy, saved, op);
  const int64_t n = dy.num_elements();
  detail::dispatch_floating(dy.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    const T* d = dy.data<T>();
    const T* s = saved.data<T>();
    T* out = dx.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      out[i] = detail::store<T>(detail::load(d[i]) * g(static_cast<C>(detail::load(s[i]))));
    }
  });
}

// relu's gradient on bfloat16 (mixed_bfloat16's hidden layers), on the bits and branch-free so it
// vectorises; bit for bit the generic loop's bfloat16(float(d) * (float(s) > 0 ? 1 : 0)):
// s > 0 keeps d (a NaN d comes out quiet, as d * 1 does); otherwise a finite d gives a zero of d's
// sign, a NaN d stays NaN (quiet), and an infinite d gives inf * 0, the default NaN (0xffc0 on
// x86, 0x7fc0 on aarch64).
void relu_grad_bfloat16(const bfloat16* dy, const bfloat16* saved, bfloat16* dz, int64_t n) {
  const uint16_t* d = reinterpret_cast<const uint16_t*>(dy);
  const uint16_t* s = reinterpret_cast<const uint16_t*>(saved);
  uint16_t* out = reinterpret_cast<uint16_t*>(dz);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t dv = d[i], sv = s[i];
    const uint16_t smag = sv & 0x7fffu, dmag = dv & 0x7fffu;
    const bool positive = (sv & 0x8000u) == 0 && smag != 0 && smag <= 0x7f80u;
    uint16_t r = positive ? dv : static_cast<uint16_t>(dv & 0x8000u);
    r = dmag > 0x7f80u ? static_cast<uint16_t>(dv | 0x0040u) : r;
    r = (!positive && dmag == 0x7f80u) ? detail::kDefaultNanBfloat16 : r;
    out[i] = r;
  }
}

template <typename G>
Tensor grad(const Tensor& dy, const Tensor& saved, const char* op, G g) {
  detail::check_defined(dy, op, "dy");
  Tensor dx(dy.shape(), dy.dtype());
  grad_into(dy, saved, dx, op, g);
  return dx;
}

constexpr double kInvSqrt2Pi = 0.39894228040143267794;

}  // namespace

Tensor neg_forward(const Tensor& x) {
  return unary(Unary::neg, x, "neg");
}
Tensor neg_backward(const Tensor& dy) {
  return grad(dy, dy, "neg_backward", [](auto) { return -1; });
}
Tensor exp_forward(const Tensor& x) {
  return unary(Unary::exp, x, "exp");
}
Tensor exp_backward(const Tensor& dy, const Tensor& y) {
  return grad(dy, y, "exp_backward", [](auto v) { return v; });
}
Tensor log_forward(const Tensor& x) {
  return unary(Unary::log, x, "log");
}
Tensor log_backward(const Tensor& dy, const Tensor& x) {
  return grad(dy, x, "log_backward", [](auto v) { return 1 / v; });
}
Tensor sqrt_forward(const Tensor& x) {
  return unary(Unary::sqrt, x, "sqrt");
}
Tensor sqrt_backward(const Tensor& dy, const Tensor& y) {
  return grad(dy, y, "sqrt_backward", [](auto v) { return 1 / (2 * v); });
}
Tensor square_forward(const Tensor& x) {
  return unary(Unary::square, x, "square");
}
Tensor square_backward(const Tensor& dy, const Tensor& x) {
  return grad(dy, x, "square_backward", [](auto v) { return 2 * v; });
}
Tensor relu_forward(const Tensor& x) {
  // oneDNN's relu is max(x, 0) and maps NaN to 0; keep NaN as TensorFlow and PyTorch do, so a NaN
  // reaches the loss (and TerminateOnNaN) instead of silently zeroing the activation.
  if (x.dtype() == DType::float32) {
    // One branch-free pass (a select the compiler vectorises; NaN < 0 is false, so NaN stays)
    // instead of oneDNN's relu followed by a pass restoring NaNs.
    Tensor y(x.shape(), DType::float32);
    relu_f32(x.data<float>(), y.data<float>(), x.num_elements());
    return y;
  }
  Tensor y = unary(Unary::relu, x, "relu");
  if (x.dtype() == DType::bfloat16) {
    const bfloat16* xs = x.data<bfloat16>();
    bfloat16* ys = y.data<bfloat16>();
    for (int64_t i = 0, n = x.num_elements(); i < n; ++i) {
      float v = static_cast<float>(xs[i]);
      if (v != v) ys[i] = xs[i];
    }
  }
  return y;
}
Tensor relu_backward(const Tensor& dy, const Tensor& y) {
  if (dy.defined() && y.defined() && dy.dtype() == DType::bfloat16 &&
      y.dtype() == DType::bfloat16 && dy.shape() == y.shape()) {
    Tensor dx(dy.shape(), DType::bfloat16);
    relu_grad_bfloat16(dy.data<bfloat16>(), y.data<bfloat16>(), dx.data<bfloat16>(),
                       dy.num_elements());
    return dx;
  }
  if (dy.defined() && y.defined() && dy.dtype() == DType::float32 && y.dtype() == DType::float32 &&
      dy.shape() == y.shape()) {
    Tensor dx(dy.shape(), DType::float32);
    relu_grad_f32(dy.data<float>(), y.data<float>(), dx.data<float>(), dy.num_elements());
    return dx;
  }
  return grad(dy, y, "relu_backward",
              [](auto v) { return v > 0 ? decltype(v)(1) : decltype(v)(0); });
}
Tensor sigmoid_forward(const Tensor& x) {
  return unary(Unary::sigmoid, x, "sigmoid");
}
Tensor sigmoid_backward(const Tensor& dy, const Tensor& y) {
  return grad(dy, y, "sigmoid_backward", [](auto v) { return v * (1 - v); });
}
Tensor tanh_forward(const Tensor& x) {
  return unary(Unary::tanh, x, "tanh");
}
Tensor tanh_backward(const Tensor& dy, const Tensor& y) {
  return grad(dy, y, "tanh_backward", [](auto v) { return 1 - v * v; });
}
Tensor gelu_forward(const Tensor& x) {
  return unary(Unary::gelu, x, "gelu");
}
Tensor gelu_backward(const Tensor& dy, const Tensor& x) {
  return detail::gelu_backward(dy, x, /*approximate=*/false);  // oneDNN's vectorised kernel
}

namespace detail {

void activation_grad_into(FusedActivation act, const Tensor& dy, const Tensor& saved,
                          const Tensor& dz) {
  const char* op = "linear_backward";
  switch (act) {
    case FusedActivation::none:
      dz.copy_from(dy);
      return;
    case FusedActivation::relu:
      if (dy.dtype() == DType::float32 && saved.dtype() == DType::float32 &&
          dy.shape() == saved.shape() && dz.dtype() == DType::float32) {
        // The hot case: a branch-free select the compiler vectorises (the generic loop branches on
        // the sign, mispredicted for half the elements). dy · 0 keeps NaN, as the generic loop.
        const float* d = dy.data<float>();
        const float* s = saved.data<float>();
        float* out = dz.data<float>();
        for (int64_t i = 0, n = dy.num_elements(); i < n; ++i) {
          const float mask = detail::positive_mask(s[i]);
          out[i] = d[i] * mask;
        }
        return;
      }
      if (dy.dtype() == DType::bfloat16 && saved.dtype() == DType::bfloat16 &&
          dy.shape() == saved.shape() && dz.dtype() == DType::bfloat16) {
        relu_grad_bfloat16(dy.data<bfloat16>(), saved.data<bfloat16>(), dz.data<bfloat16>(),
                           dy.num_elements());
        return;
      }
      grad_into(dy, saved, dz, op, [](auto v) { return v > 0 ? decltype(v)(1) : decltype(v)(0); });
      return;
    case FusedActivation::sigmoid:
      grad_into(dy, saved, dz, op, [](auto v) { return v * (1 - v); });
      return;
    case FusedActivation::tanh:
      grad_into(dy, saved, dz, op, [](auto v) { return 1 - v * v; });
      return;
    case FusedActivation::gelu:
      if (dy.dtype() == saved.dtype() && dz.dtype() == dy.dtype()) {
        detail::gelu_backward_into(dy, saved, dz, /*approximate=*/false);
        return;
      }
      grad_into(dy, saved, dz, op, [](auto v) {
        using C = decltype(v);
        C cdf = C(0.5) * (C(1) + std::erf(v * C(M_SQRT1_2)));
        return cdf + v * C(kInvSqrt2Pi) * std::exp(C(-0.5) * v * v);
      });
      return;
  }
}

}  // namespace detail

}  // namespace lockstep::ops
