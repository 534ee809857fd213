#pragma once
// Ops that move, select or convert elements, forward and backward.
//
//   reshape(x, shape)      a view of x (same elements, row-major order); backward: reshape back
//   flatten(x)             [d0, d1, ..., dk] -> [d0, d1·...·dk] (Keras Flatten keeps the batch)
//   transpose(x, perm)     y.dim(i) = x.dim(perm[i]); default perm reverses the dimensions;
//                          backward: transpose by the inverse permutation
//   concat(xs, axis)       joins along `axis` (other dimensions equal); backward: split of dy
//   cast(x, dtype)         element conversion (float32 <-> bfloat16 through oneDNN reorders,
//                          rounding to nearest even); backward: cast dy back to x's dtype
//   argmax(x, axis)        int64 index of the first maximum along `axis` (not differentiable)
//   one_hot(indices, depth, dtype)
//                          [...] integer -> [..., depth], 1 at the index, 0 elsewhere; an index
//                          outside [0, depth) throws InvalidArgument naming it and the depth
//                          (tf.one_hot gives a row of zeros, which as a label is a wrong loss)
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::ops {

Tensor reshape_forward(const Tensor& x, const Shape& shape);
Tensor flatten_forward(const Tensor& x);

Tensor transpose_forward(const Tensor& x, const std::vector<int>& perm = {});
Tensor transpose_backward(const Tensor& dy, const std::vector<int>& perm = {});

Tensor concat_forward(const std::vector<Tensor>& xs, int axis = 0);
// Splits dy along `axis` into pieces of the given sizes (the inputs' dims along axis).
std::vector<Tensor> concat_backward(const Tensor& dy, const std::vector<int64_t>& sizes,
                                    int axis = 0);

Tensor cast_forward(const Tensor& x, DType dtype);
Tensor cast_backward(const Tensor& dy, DType x_dtype);
// float32 -> float32 rounded to bfloat16 values (round to nearest even, NaN stays NaN): bit for
// bit cast(cast(x, bfloat16), float32), in one pass. Used by mixed_bfloat16 layers for shapes
// whose bfloat16 matmuls compute in float32 (bf16_matmul_computes_in_f32): the weights get
// bfloat16 precision without a bfloat16 copy that every matmul would widen again. Its gradient is
// the identity (like the cast pair's, whose float32 gradient would be rounded to bfloat16 instead).
Tensor round_to_bfloat16_forward(const Tensor& x);

Tensor argmax(const Tensor& x, int axis = -1);
Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype = DType::float32);

}  // namespace lockstep::ops
