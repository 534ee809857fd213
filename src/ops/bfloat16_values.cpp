#include "lockstep/ops/bfloat16_values.h"
#include "core/cpu_dispatch.h"

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/check.h"

#include "internal.h"
#include "kernel_util.h"

namespace lockstep::ops {
namespace {

LOCKSTEP_DISPATCHED(void, round_relu_f32,
                    (const float* __restrict x, float* __restrict y, int64_t n), (x, y, n)) {
  for (int64_t i = 0; i < n; ++i) {
    const float r = round_to_bfloat16_value(x[i]);
    y[i] = r < 0.0f ? 0.0f : r;
  }
}

LOCKSTEP_DISPATCHED(void, round_sum_f32,
                    (const float* __restrict a, const float* __restrict b, float* __restrict y,
                     int64_t n),
                    (a, b, y, n)) {
  for (int64_t i = 0; i < n; ++i) y[i] = round_to_bfloat16_value(a[i] + b[i]);
}

LOCKSTEP_DISPATCHED(void, round_sum_of_rounded_f32,
                    (const float* __restrict a, const float* __restrict b, float* __restrict y,
                     int64_t n),
                    (a, b, y, n)) {
  for (int64_t i = 0; i < n; ++i) {
    y[i] = round_to_bfloat16_value(round_to_bfloat16_value(a[i]) + round_to_bfloat16_value(b[i]));
  }
}

// dx may be dy (rounded in place).
LOCKSTEP_DISPATCHED(void, round_relu_grad_f32,
                    (const float* dy, const float* __restrict y, float* dx, int64_t n),
                    (dy, y, dx, n)) {
  for (int64_t i = 0; i < n; ++i) {
    dx[i] = round_to_bfloat16_value(dy[i]) * detail::positive_mask(y[i]);
  }
}

Tensor rounded(const Tensor& x) {
  Tensor y(x.shape(), DType::float32);
  round_to_bfloat16_values(x.data<float>(), y.data<float>(), static_cast<size_t>(x.num_elements()));
  return y;
}

}  // namespace

Tensor to_bfloat16_values_forward(const Tensor& x, bool reuse_sole_handle) {
  detail::check_float32(x, "to_bfloat16_values", "x");
  if (reuse_sole_handle && x.sole_handle()) {
    // Nobody else can read x's values: round them where they are (one stream fewer than a new
    // tensor) and hand back a new handle on them.
    round_to_bfloat16_values(x.data<float>(), x.data<float>(),
                             static_cast<size_t>(x.num_elements()));
    x.mark_bfloat16_values();
    return x.reshape(x.shape());
  }
  Tensor y = rounded(x);
  y.mark_bfloat16_values();
  return y;
}

// A gradient the tape has handed over and nobody else holds (Tensor::sole_handle) is rounded in
// place: the tape drops an intermediate gradient before calling the backward that consumes it.
Tensor to_bfloat16_values_backward(const Tensor& dy) {
  detail::check_float32(dy, "to_bfloat16_values_backward", "dy");
  if (dy.holds_bfloat16_values()) return dy;  // its producer rounded it as it stored it
  Tensor dx = dy.sole_handle() ? dy : Tensor(dy.shape(), DType::float32);
  round_to_bfloat16_values(dy.data<float>(), dx.data<float>(),
                           static_cast<size_t>(dy.num_elements()));
  dx.mark_bfloat16_values();  // a later rounding of it (a shared gradient's other reader) is free
  return dx;
}

Tensor add_to_bfloat16_values_forward(const Tensor& a, const Tensor& b, bool round_inputs) {
  const char* op = "add_to_bfloat16_values";
  detail::check_float32(a, op, "a");
  detail::check_float32(b, op, "b");
  LOCKSTEP_CHECK(a.shape() == b.shape(), op, ": expected a and b of one shape. Received: a ",
                 a.describe(), ", b ", b.describe(), ".");
  Tensor y(a.shape(), DType::float32);
  auto sum = round_inputs ? round_sum_of_rounded_f32 : round_sum_f32;
  sum(a.data<float>(), b.data<float>(), y.data<float>(), a.num_elements());
  y.mark_bfloat16_values();
  return y;
}

Tensor relu_to_bfloat16_values_forward(const Tensor& x) {
  detail::check_float32(x, "relu_to_bfloat16_values", "x");
  Tensor y(x.shape(), DType::float32);
  round_relu_f32(x.data<float>(), y.data<float>(), x.num_elements());
  y.mark_bfloat16_values();
  return y;
}

Tensor relu_to_bfloat16_values_backward(const Tensor& dy, const Tensor& y) {
  const char* op = "relu_to_bfloat16_values_backward";
  detail::check_float32(dy, op, "dy");
  detail::check_float32(y, op, "y");
  detail::check_same_shape(dy, y, op);
  Tensor dx = dy.sole_handle() ? dy : Tensor(dy.shape(), DType::float32);
  round_relu_grad_f32(dy.data<float>(), y.data<float>(), dx.data<float>(), dy.num_elements());
  dx.mark_bfloat16_values();
  return dx;
}

}  // namespace lockstep::ops
