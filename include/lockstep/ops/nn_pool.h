#pragma once
// 2-D max pooling in Keras' layout (channels_last), forward and backward.
//
//   input   [N, H, W, C]
//   output  [N, OH, OW, C]     OH, OW from window_geometry (nn_padding.h)
//   output[n, oh, ow, c] = max_{i < PH, j < PW} input[n, oh*sh + i - pad_top, ow*sw + j - pad_left,
//   c]
// over the window positions inside the input: padding never wins (TensorFlow treats it as -inf),
// and "same" padding never leaves a window empty. A NaN in a window makes that output NaN.
//
// The forward pass also returns, per output element, the flat index into `input` of the element
// that won (the first one in row-major window order on ties, as TensorFlow); the backward pass
// routes each output gradient to that element:
//   grad_input[argmax[e]] += grad_output[e]
// Plain loops for float32, bfloat16 and float64 (pooling is memory-bound; the indices make the
// backward pass a scatter instead of a second search).
#include <array>
#include <cstdint>

#include "lockstep/core/tensor.h"
#include "lockstep/ops/nn_padding.h"

namespace lockstep::ops {

struct Pool2DOptions {
  std::array<int64_t, 2> pool_size{2, 2};  // {height, width}
  // {height, width}; {0, 0} means "equal to pool_size", as Keras' strides=None.
  std::array<int64_t, 2> strides{0, 0};
  Padding padding = Padding::valid;
};

struct MaxPool2DResult {
  Tensor output;  // [N, OH, OW, C], input's dtype
  Tensor argmax;  // [N, OH, OW, C] int64: flat index into input of each output's source
};

MaxPool2DResult max_pool2d_forward(const Tensor& input, const Pool2DOptions& options = {});

// grad_input [N, H, W, C] (= input_shape) in grad_output's dtype; grad_output and argmax
// [N, OH, OW, C] as returned by max_pool2d.
Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& argmax,
                           const Shape& input_shape);

// The same given the forward pass's options. Where windows do not overlap (strides >= pool_size,
// Keras' default) a float32 grad_input is written once, window by window (0 + grad_output at the
// window's argmax, 0 elsewhere: the bits of the scatter), instead of zeroed and then scattered
// into; an argmax outside its own window is an error there.
Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& argmax,
                           const Shape& input_shape, const Pool2DOptions& options);

}  // namespace lockstep::ops
