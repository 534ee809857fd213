#include "lockstep/ops/batch_matmul.h"
#include "lockstep/core/check.h"

#include <string>

#include "batched_gemm.h"
#include "kernel_util.h"

namespace lockstep::ops {
namespace {

struct Dims {
  int64_t batch, m, k, n;
};

std::string flags(bool ta, bool tb) {
  return std::string(" (transpose_a=") + (ta ? "true" : "false") +
         ", transpose_b=" + (tb ? "true" : "false") + ")";
}

Dims check(const Tensor& a, const Tensor& b, bool ta, bool tb, const char* op) {
  detail::check_floating(a, op, "a");
  detail::check_floating(b, op, "b");
  detail::check_same_dtype(a, b, op);
  LOCKSTEP_CHECK(a.rank() >= 3 && a.rank() == b.rank(), op,
                 ": expected operands of the same rank >= 3 ([..., rows, cols]; use matmul for "
                 "rank 2). Received: ",
                 a.describe(), " and ", b.describe(), ".");
  const int r = a.rank();
  int64_t batch = 1;
  for (int d = 0; d < r - 2; ++d) {
    LOCKSTEP_CHECK(a.dim(d) == b.dim(d), op,
                   ": expected equal batch dimensions. Received: ", a.describe(), " and ",
                   b.describe(), " (dimension ", d, ": ", a.dim(d), " vs ", b.dim(d), ").");
    batch *= a.dim(d);
  }
  Dims d{batch, ta ? a.dim(r - 1) : a.dim(r - 2), ta ? a.dim(r - 2) : a.dim(r - 1),
         tb ? b.dim(r - 2) : b.dim(r - 1)};
  const int64_t kb = tb ? b.dim(r - 1) : b.dim(r - 2);
  LOCKSTEP_CHECK(d.k == kb, op, ": shapes ", a.shape(), " and ", b.shape(), " cannot be multiplied",
                 flags(ta, tb), ": op(a) has ", d.k, " columns, op(b) has ", kb, " rows.");
  return d;
}

// The [batch, rows, cols] matrices of a contiguous tensor, transposed when asked.
detail::StridedBatch view(const Tensor& t, bool transpose) {
  const int64_t rows = t.dim(-2), cols = t.dim(-1);
  int64_t batch = 1;
  for (int d = 0; d < t.rank() - 2; ++d) batch *= t.dim(d);
  detail::StridedBatch v{.data = t.raw_data(),
                         .dtype = t.dtype(),
                         .b0 = batch,
                         .b1 = 1,
                         .rows = rows,
                         .cols = cols,
                         .s0 = rows * cols,
                         .s1 = 0,
                         .rs = cols,
                         .cs = 1};
  return transpose ? v.t() : v;
}

void product_into(const Tensor& a, const Tensor& b, bool ta, bool tb, const Tensor& y) {
  detail::batched_gemm(view(a, ta), view(b, tb), view(y, false));
}

}  // namespace

Tensor batch_matmul_forward(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  Dims d = check(a, b, transpose_a, transpose_b, "batch_matmul");
  Shape out = a.shape().with_dim(-2, d.m).with_dim(-1, d.n);
  Tensor y(out, a.dtype());
  product_into(a, b, transpose_a, transpose_b, y);
  return y;
}

BatchMatmulGrads batch_matmul_backward(const Tensor& dy, const Tensor& a, const Tensor& b, bool ta,
                                       bool tb, bool need_da, bool need_db) {
  Dims d = check(a, b, ta, tb, "batch_matmul_backward");
  detail::check_defined(dy, "batch_matmul_backward", "dy");
  const Shape expected = a.shape().with_dim(-2, d.m).with_dim(-1, d.n);
  LOCKSTEP_CHECK(dy.shape() == expected && dy.dtype() == a.dtype(),
                 "batch_matmul_backward: expected dy of shape ", expected.to_string(),
                 " and dtype ", dtype_name(a.dtype()), " for a ", a.describe(), " and b ",
                 b.describe(), ". Received: ", dy.describe(), ".");
  BatchMatmulGrads g;
  if (need_da) {
    g.da = Tensor(a.shape(), a.dtype());
    if (!ta) {
      product_into(dy, b, false, !tb, g.da);  // dy·op(b)ᵀ
    } else {
      product_into(b, dy, tb, true, g.da);  // op(b)·dyᵀ
    }
  }
  if (need_db) {
    g.db = Tensor(b.shape(), b.dtype());
    if (!tb) {
      product_into(a, dy, !ta, false, g.db);  // op(a)ᵀ·dy
    } else {
      product_into(dy, a, true, ta, g.db);  // dyᵀ·op(a)
    }
  }
  return g;
}

}  // namespace lockstep::ops
