#pragma once
// 2-D convolution in Keras' layouts (data_format="channels_last"), forward and backward.
//
//   input   [N, H, W, C_in]            (NHWC)
//   kernel  [KH, KW, C_in, C_out]      (as Keras stores Conv2D.kernel)
//   bias    [C_out] or undefined
//   output  [N, OH, OW, C_out]         OH, OW from window_geometry (nn_padding.h)
//
//   output[n, oh, ow, o] = bias[o] + sum_{i, j, c} input[n, oh*sh + i - pad_top, ow*sw + j -
//   pad_left, c]
//                                                  * kernel[i, j, c, o]
// where out-of-range input positions (the padding) count as zero. Dilation is 1.
//
// float32 and bfloat16 run through oneDNN (convolution forward / backward data / backward weights;
// primitives are created once per shape, dtype and thread, then reused); float64 runs plain loops
// (the path gradient checks use). All tensors of one call share a dtype; outputs have it too.
// bfloat16 accumulates in float32 inside oneDNN.
#include <array>
#include <cstdint>

#include "lockstep/core/tensor.h"
#include "lockstep/ops/nn_padding.h"

namespace lockstep::ops {

struct Conv2DOptions {
  std::array<int64_t, 2> strides{1, 1};  // {height, width}
  Padding padding = Padding::valid;
};

Tensor conv2d_forward(const Tensor& input, const Tensor& kernel, const Tensor& bias = Tensor(),
                      const Conv2DOptions& options = {});

// d(loss)/d(input) given d(loss)/d(output): the transposed convolution of grad_output with kernel.
Tensor conv2d_backward_input(const Tensor& grad_output, const Tensor& kernel,
                             const Shape& input_shape, const Conv2DOptions& options = {});

// d(loss)/d(kernel)[i, j, c, o] = sum_{n, oh, ow} input[n, oh*sh + i - pt, ow*sw + j - pl, c]
//                                                 * grad_output[n, oh, ow, o]
Tensor conv2d_backward_kernel(const Tensor& grad_output, const Tensor& input,
                              const Shape& kernel_shape, const Conv2DOptions& options = {});

// d(loss)/d(bias)[o] = sum_{n, oh, ow} grad_output[n, oh, ow, o], each channel's terms added in
// order in float64 (float32 and bfloat16 inputs; the result in the input's dtype).
Tensor conv2d_backward_bias(const Tensor& grad_output);

// A convolution followed by relu (Keras' Conv2D(activation="relu")), relu keeping NaN as
// TensorFlow does. In float32, relu runs inside oneDNN's convolution (a post-op, no pass of its
// own over the output) when no output can be infinite or NaN — every input, weight and bias
// finite and |bias| + KH·KW·C_in·max|input|·max|kernel| far below float32's largest value, which
// a pass over the inputs checks — since oneDNN's relu maps NaN to 0; otherwise the output is
// rectified in place after the convolution. The values of relu_forward(conv2d_forward(...)) (a
// -0 may come out +0).
Tensor conv2d_relu_forward(const Tensor& input, const Tensor& kernel, const Tensor& bias = Tensor(),
                           const Conv2DOptions& options = {});

// The first step of its backward pass, in one pass over dy and the forward output y:
// dz = relu_backward(dy, y), and the bias gradient conv2d_backward_bias(dz) when `with_bias`
// (the same bits as those two calls).
struct ConvReluGrad {
  Tensor dz, dbias;
};
ConvReluGrad conv2d_relu_backward_bias(const Tensor& dy, const Tensor& y, bool with_bias);

}  // namespace lockstep::ops
