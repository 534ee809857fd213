#pragma once
// Reductions along axes, forward and backward. Floating dtypes; float32 / bfloat16 accumulate in
// float32, float64 in double.
//
// `axes` lists the dimensions to reduce (negative counts from the end); empty means all of them
// (tf.reduce_sum(x) with axis=None). With keepdims the reduced dimensions stay as size 1.
//
//   reduce_sum   y = Σ x                  dx = broadcast(dy)
//   reduce_mean  y = Σ x / N              dx = broadcast(dy) / N,   N = number of reduced elements
//   reduce_max   y = max x                dx = broadcast(dy) · [x = y] / (number of ties)
//                                         (ties share the gradient equally, as in TensorFlow)
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::ops {

Tensor reduce_sum_forward(const Tensor& x, const std::vector<int>& axes = {},
                          bool keepdims = false);
Tensor reduce_mean_forward(const Tensor& x, const std::vector<int>& axes = {},
                           bool keepdims = false);
Tensor reduce_max_forward(const Tensor& x, const std::vector<int>& axes = {},
                          bool keepdims = false);

Tensor reduce_sum_backward(const Tensor& dy, const Shape& x_shape, const std::vector<int>& axes,
                           bool keepdims);
Tensor reduce_mean_backward(const Tensor& dy, const Shape& x_shape, const std::vector<int>& axes,
                            bool keepdims);
// y is reduce_max's output for x.
Tensor reduce_max_backward(const Tensor& dy, const Tensor& x, const Tensor& y,
                           const std::vector<int>& axes, bool keepdims);

// The shape of a reduction's result (for callers that preallocate).
Shape reduced_shape(const Shape& x_shape, const std::vector<int>& axes, bool keepdims);

}  // namespace lockstep::ops
