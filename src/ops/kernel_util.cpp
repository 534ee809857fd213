#include "kernel_util.h"
#include "lockstep/core/check.h"

namespace lockstep::ops::detail {

void check_defined(const Tensor& t, const char* op, const char* name) {
  LOCKSTEP_CHECK(t.defined(), op, ": expected a tensor for `", name,
                 "`. Received: an undefined Tensor.");
}

void check_floating(const Tensor& t, const char* op, const char* name) {
  check_defined(t, op, name);
  LOCKSTEP_CHECK(is_floating(t.dtype()), op, ": expected `", name,
                 "` of a floating dtype (float32, bfloat16, float64). Received: ", t.describe(),
                 ".");
}

void check_float32(const Tensor& t, const char* op, const char* name) {
  check_defined(t, op, name);
  LOCKSTEP_CHECK(t.dtype() == DType::float32, op, ": expected a float32 ", name,
                 ". Received: ", t.describe(), ".");
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  LOCKSTEP_CHECK(a.dtype() == b.dtype(), op,
                 ": expected operands of the same dtype. Received: ", a.describe(), " and ",
                 b.describe(), ". Cast one of them first.");
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  LOCKSTEP_CHECK(a.shape() == b.shape(), op,
                 ": expected operands of the same shape. Received: ", a.describe(), " and ",
                 b.describe(), ".");
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  int r = std::max(a.rank(), b.rank());
  Shape out;
  for (int d = 0; d < r; ++d) {
    int ia = d - (r - a.rank()), ib = d - (r - b.rank());
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    LOCKSTEP_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a.to_string(), " and ",
                   b.to_string(), " cannot be broadcast together (dimension ", d, ": ", da, " vs ",
                   db, ").");
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

AxisSplit split_at_axis(const Shape& shape, int axis) {
  int ax = shape.normalize_axis(axis);
  AxisSplit s;
  for (int d = 0; d < shape.rank(); ++d) {
    if (d < ax) s.outer *= shape[d];
    if (d == ax) s.n = shape[d];
    if (d > ax) s.inner *= shape[d];
  }
  return s;
}

}  // namespace lockstep::ops::detail
