#include "lockstep/ops/elementwise.h"
#include "lockstep/core/check.h"

#include <cstring>
#include <string>
#include <type_traits>

#include "core/cpu_dispatch.h"
#include "internal.h"
#include "kernel_util.h"

namespace lockstep::ops {
namespace {

enum class Binary { add, sub, mul, div };

template <typename C>
inline C apply(Binary op, C a, C b) {
  switch (op) {
    case Binary::add:
      return a + b;
    case Binary::sub:
      return a - b;
    case Binary::mul:
      return a * b;
    case Binary::div:
      return a / b;
  }
  return a;
}

// Contiguous operands of the training dtypes, built for AVX-512 as well (cpu_dispatch.h): the
// residual adds of a transformer and the tape's gradient accumulation run here. y may be a (in
// place). bfloat16 is widened to float, combined and rounded to nearest even without a branch
// (NaN stays a quiet NaN): bit for bit what detail::store<bfloat16> gives.
[[gnu::always_inline]] inline uint16_t round_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}
[[gnu::always_inline]] inline float widen_bits(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
template <Binary OP>
[[gnu::always_inline]] inline void contiguous_f32(const float* a, const float* b, float* y,
                                                  int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = apply(OP, a[j], b[j]);
}
template <Binary OP>
[[gnu::always_inline]] inline void contiguous_bf16(const uint16_t* a, const uint16_t* b,
                                                   uint16_t* y, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    y[j] = round_to_bits(apply(OP, widen_bits(a[j]), widen_bits(b[j])));
}
LOCKSTEP_DISPATCHED(void, contiguous,
                    (Binary op, const float* a, const float* b, float* y, int64_t n),
                    (op, a, b, y, n)) {
  switch (op) {
    case Binary::add:
      return contiguous_f32<Binary::add>(a, b, y, n);
    case Binary::sub:
      return contiguous_f32<Binary::sub>(a, b, y, n);
    case Binary::mul:
      return contiguous_f32<Binary::mul>(a, b, y, n);
    case Binary::div:
      return contiguous_f32<Binary::div>(a, b, y, n);
  }
}
LOCKSTEP_DISPATCHED(void, contiguous,
                    (Binary op, const uint16_t* a, const uint16_t* b, uint16_t* y, int64_t n),
                    (op, a, b, y, n)) {
  switch (op) {
    case Binary::add:
      return contiguous_bf16<Binary::add>(a, b, y, n);
    case Binary::sub:
      return contiguous_bf16<Binary::sub>(a, b, y, n);
    case Binary::mul:
      return contiguous_bf16<Binary::mul>(a, b, y, n);
    case Binary::div:
      return contiguous_bf16<Binary::div>(a, b, y, n);
  }
}

// The innermost loop, specialised for the common stride patterns so that it vectorises.
template <typename T, Binary OP>
void run(const T* a, const T* b, T* y, int64_t sa, int64_t sb, int64_t n) {
  using C = detail::compute_t<T>;
  if constexpr (std::is_same_v<T, float>) {
    if (sa == 1 && sb == 1) return contiguous(OP, a, b, y, n);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    if (sa == 1 && sb == 1) {
      return contiguous(OP, reinterpret_cast<const uint16_t*>(a),
                        reinterpret_cast<const uint16_t*>(b), reinterpret_cast<uint16_t*>(y), n);
    }
  }
  if (sa == 1 && sb == 1) {
    for (int64_t j = 0; j < n; ++j)
      y[j] = detail::store<T>(apply(OP, detail::load(a[j]), detail::load(b[j])));
  } else if (sa == 1 && sb == 0) {
    const C bv = detail::load(b[0]);
    for (int64_t j = 0; j < n; ++j) y[j] = detail::store<T>(apply(OP, detail::load(a[j]), bv));
  } else if (sa == 0 && sb == 1) {
    const C av = detail::load(a[0]);
    for (int64_t j = 0; j < n; ++j) y[j] = detail::store<T>(apply(OP, av, detail::load(b[j])));
  } else {
    for (int64_t j = 0; j < n; ++j)
      y[j] = detail::store<T>(apply(OP, detail::load(a[j * sa]), detail::load(b[j * sb])));
  }
}

template <Binary OP>
Tensor binary(const Tensor& a, const Tensor& b, const char* name) {
  detail::check_floating(a, name, "a");
  detail::check_floating(b, name, "b");
  detail::check_same_dtype(a, b, name);
  Shape out = detail::broadcast_shapes(a.shape(), b.shape(), name);
  Tensor y(out, a.dtype());
  detail::dispatch_floating(a.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* py = y.data<T>();
    if (a.shape() == out && b.shape() == out) {
      run<T, OP>(pa, pb, py, 1, 1, out.num_elements());
      return;
    }
    detail::BroadcastWalk<2> walk(out, {a.shape(), b.shape()});
    walk.for_each_run(
        [&](const std::array<int64_t, 2>& off, const std::array<int64_t, 2>& st, int64_t o,
            int64_t n) { run<T, OP>(pa + off[0], pb + off[1], py + o, st[0], st[1], n); });
  });
  return y;
}

template <Binary OP>
void in_place(const Tensor& dst, const Tensor& src, const char* name) {
  LOCKSTEP_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(), name,
                 ": expected src of dst's shape and dtype (", dst.describe(),
                 "). Received: src=", src.describe(), ".");
  const int64_t n = dst.num_elements();
  // Integers add in their own type (the floating loop computes in float).
  auto integer = [&](auto tag) {
    using T = decltype(tag);
    T* d = dst.data<T>();
    const T* s = src.data<T>();
    for (int64_t i = 0; i < n; ++i) d[i] = apply(OP, d[i], s[i]);
  };
  switch (dst.dtype()) {
    case DType::int32:
      return integer(int32_t{});
    case DType::int64:
      return integer(int64_t{});
    default:
      detail::dispatch_floating(dst.dtype(), name, [&](auto tag) {
        using T = decltype(tag);
        run<T, OP>(dst.data<T>(), src.data<T>(), dst.data<T>(), 1, 1, n);
      });
  }
}

void check_dy(const Tensor& dy, const Shape& a_shape, const Shape& b_shape, const char* op) {
  detail::check_floating(dy, op, "dy");
  Shape out = detail::broadcast_shapes(a_shape, b_shape, op);
  LOCKSTEP_CHECK(dy.shape() == out, op, ": expected dy of shape ", out.to_string(),
                 " (the broadcast of ", a_shape, " and ", b_shape, "). Received: ", dy.describe(),
                 ".");
}

}  // namespace

Tensor add_forward(const Tensor& a, const Tensor& b) {
  return binary<Binary::add>(a, b, "add");
}
Tensor sub_forward(const Tensor& a, const Tensor& b) {
  return binary<Binary::sub>(a, b, "sub");
}
Tensor mul_forward(const Tensor& a, const Tensor& b) {
  return binary<Binary::mul>(a, b, "mul");
}
Tensor div_forward(const Tensor& a, const Tensor& b) {
  return binary<Binary::div>(a, b, "div");
}

LOCKSTEP_DISPATCHED(void, add_into, (float* __restrict dst, const float* __restrict src, int64_t n),
                    (dst, src, n)) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

LOCKSTEP_DISPATCHED(void, sum_into,
                    (float* __restrict out, const float* __restrict a, const float* __restrict b,
                     int64_t n),
                    (out, a, b, n)) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_into(const Tensor& dst, const Tensor& src) {
  in_place<Binary::add>(dst, src, "add_into");
  dst.clear_bfloat16_values();  // a sum of bfloat16 values need not be one
  dst.clear_transposed_copy();
}
void sub_into(const Tensor& dst, const Tensor& src) {
  in_place<Binary::sub>(dst, src, "sub_into");
  dst.clear_bfloat16_values();
  dst.clear_transposed_copy();
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  detail::check_floating(g, "sum_to", "g");
  if (g.shape() == shape) return g;
  Shape check = detail::broadcast_shapes(g.shape(), shape, "sum_to");
  LOCKSTEP_CHECK(check == g.shape(), "sum_to: shape ", shape, " does not broadcast to ", g.shape(),
                 ".");
  Tensor out(shape, g.dtype());
  detail::dispatch_floating(g.dtype(), "sum_to", [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    // Accumulate in the compute type (float for bfloat16), then round once.
    DType acc_dtype = std::is_same_v<C, double> ? DType::float64 : DType::float32;
    Tensor acc = Tensor::zeros(shape, acc_dtype);
    C* pa = acc.data<C>();
    const T* pg = g.data<T>();
    detail::BroadcastWalk<1> walk(g.shape(), {shape});
    walk.for_each_run([&](const std::array<int64_t, 1>& off, const std::array<int64_t, 1>& st,
                          int64_t o, int64_t n) {
      C* dst = pa + off[0];
      if (st[0] == 1) {
        for (int64_t j = 0; j < n; ++j) dst[j] += detail::load(pg[o + j]);
      } else {
        C s = 0;
        for (int64_t j = 0; j < n; ++j) s += detail::load(pg[o + j]);
        dst[0] += s;
      }
    });
    T* po = out.data<T>();
    for (int64_t i = 0; i < out.num_elements(); ++i) po[i] = detail::store<T>(pa[i]);
  });
  return out;
}

Tensor scale(const Tensor& x, double c) {
  detail::check_floating(x, "scale", "x");
  Tensor y(x.shape(), x.dtype());
  detail::dispatch_floating(x.dtype(), "scale", [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const C cc = static_cast<C>(c);
    for (int64_t i = 0; i < x.num_elements(); ++i)
      py[i] = detail::store<T>(cc * detail::load(px[i]));
  });
  return y;
}

BinaryGrads add_backward(const Tensor& dy, const Shape& a_shape, const Shape& b_shape, bool need_da,
                         bool need_db) {
  check_dy(dy, a_shape, b_shape, "add_backward");
  BinaryGrads g;
  if (need_da) g.da = sum_to(dy, a_shape);
  if (need_db) g.db = sum_to(dy, b_shape);
  return g;
}

BinaryGrads sub_backward(const Tensor& dy, const Shape& a_shape, const Shape& b_shape, bool need_da,
                         bool need_db) {
  check_dy(dy, a_shape, b_shape, "sub_backward");
  BinaryGrads g;
  if (need_da) g.da = sum_to(dy, a_shape);
  if (need_db) g.db = scale(sum_to(dy, b_shape), -1.0);
  return g;
}

BinaryGrads mul_backward(const Tensor& dy, const Tensor& a, const Tensor& b, bool need_da,
                         bool need_db) {
  check_dy(dy, a.shape(), b.shape(), "mul_backward");
  BinaryGrads g;
  if (need_da) g.da = sum_to(mul_forward(dy, b), a.shape());
  if (need_db) g.db = sum_to(mul_forward(dy, a), b.shape());
  return g;
}

BinaryGrads div_backward(const Tensor& dy, const Tensor& a, const Tensor& b, bool need_da,
                         bool need_db) {
  check_dy(dy, a.shape(), b.shape(), "div_backward");
  BinaryGrads g;
  if (need_da) g.da = sum_to(div_forward(dy, b), a.shape());
  if (need_db)
    g.db = sum_to(scale(div_forward(mul_forward(dy, a), mul_forward(b, b)), -1.0), b.shape());
  return g;
}

Tensor bias_add_forward(const Tensor& x, const Tensor& bias) {
  detail::check_floating(x, "bias_add", "x");
  detail::check_floating(bias, "bias_add", "bias");
  detail::check_same_dtype(x, bias, "bias_add");
  LOCKSTEP_CHECK(x.rank() >= 1 && bias.rank() == 1 && bias.dim(0) == x.dim(-1),
                 "bias_add: expected bias [n] matching x's last dimension. Received: x ",
                 x.describe(), " and bias ", bias.describe(), ".");
  return add_forward(x, bias);
}

BiasAddGrads bias_add_backward(const Tensor& dy, bool need_dx, bool need_dbias) {
  detail::check_floating(dy, "bias_add_backward", "dy");
  LOCKSTEP_CHECK(dy.rank() >= 1,
                 "bias_add_backward: expected dy of rank >= 1. Received: ", dy.describe(), ".");
  BiasAddGrads g;
  if (need_dx) g.dx = dy;
  if (need_dbias) {
    g.dbias = Tensor(Shape{dy.dim(-1)}, dy.dtype());
    detail::column_sums_into(
        dy.reshape(Shape{dy.num_elements() / std::max<int64_t>(dy.dim(-1), 1), dy.dim(-1)}),
        g.dbias);
  }
  return g;
}

}  // namespace lockstep::ops
