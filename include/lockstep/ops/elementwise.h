#pragma once
// Binary elementwise ops with NumPy broadcasting, forward and backward.
//
// Shapes broadcast as in NumPy: aligned from the last dimension, a dimension of 1 (or a missing
// leading one) stretches to the other operand's. Both operands must have the same floating dtype.
// Gradients of a broadcast operand are summed over the stretched dimensions (`sum_to`):
//
//   add  y = a + b     da = dy,            db = dy
//   sub  y = a − b     da = dy,            db = −dy
//   mul  y = a · b     da = dy · b,        db = dy · a
//   div  y = a / b     da = dy / b,        db = −dy · a / b²
//
//   bias_add  y[..., j] = x[..., j] + bias[j]   dx = dy, dbias[j] = Σ_{all but last} dy[..., j]
#include "lockstep/core/tensor.h"

namespace lockstep::ops {

Tensor add_forward(const Tensor& a, const Tensor& b);
Tensor sub_forward(const Tensor& a, const Tensor& b);
Tensor mul_forward(const Tensor& a, const Tensor& b);
Tensor div_forward(const Tensor& a, const Tensor& b);

// Gradients with respect to a and b; undefined when not requested.
struct BinaryGrads {
  Tensor da, db;
};
BinaryGrads add_backward(const Tensor& dy, const Shape& a_shape, const Shape& b_shape,
                         bool need_da = true, bool need_db = true);
BinaryGrads sub_backward(const Tensor& dy, const Shape& a_shape, const Shape& b_shape,
                         bool need_da = true, bool need_db = true);
BinaryGrads mul_backward(const Tensor& dy, const Tensor& a, const Tensor& b, bool need_da = true,
                         bool need_db = true);
BinaryGrads div_backward(const Tensor& dy, const Tensor& a, const Tensor& b, bool need_da = true,
                         bool need_db = true);

// x: [..., n], bias: [n].
Tensor bias_add_forward(const Tensor& x, const Tensor& bias);
struct BiasAddGrads {
  Tensor dx, dbias;
};
BiasAddGrads bias_add_backward(const Tensor& dy, bool need_dx = true, bool need_dbias = true);

// Sums `g` over the dimensions along which `shape` was broadcast to g.shape(), returning `shape`
// (the reverse of broadcasting). Returns g itself when the shapes are equal.
Tensor sum_to(const Tensor& g, const Shape& shape);

// y = c · x for a scalar c (used by gradients of means).
Tensor scale(const Tensor& x, double c);

// In place, on no tape: dst += src (sub_into: dst −= src), for accumulating gradients and sums and
// for Variable::assign_add / assign_sub. Same shape and dtype, no broadcasting; floating dtypes
// compute as add_forward does (bfloat16 through float32), int32 / int64 in their own type. The
// one elementwise add-into of the library: other code calls these instead of writing the loop.
void add_into(const Tensor& dst, const Tensor& src);
void sub_into(const Tensor& dst, const Tensor& src);
// The float32 loops themselves, for callers that hold raw buffers (the training step's chunk
// sums, an optimizer's sum of two gradients): dst[i] += src[i], and out[i] = a[i] + b[i]. Built for
// AVX-512 and the baseline; one float32 add per element either way, so the bits do not depend on
// the CPU.
void add_into(float* __restrict dst, const float* __restrict src, int64_t n);
void sum_into(float* __restrict out, const float* __restrict a, const float* __restrict b,
              int64_t n);

}  // namespace lockstep::ops
