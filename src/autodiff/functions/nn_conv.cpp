#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/nn_functions.h"

namespace lockstep {

using Grads = std::vector<Tensor>;

Tensor conv2d(const Tensor& x, const Tensor& kernel, const Tensor& bias,
              const ops::Conv2DOptions& options) {
  Tensor y = ops::conv2d_forward(x, kernel, bias, options);
  if (autodiff::should_record({&x, &kernel, &bias})) {
    // The first layer's input is data: skipping its gradient saves a whole transposed convolution.
    const bool need_dx = autodiff::should_record({&x});
    const bool need_dk = autodiff::should_record({&kernel});
    const bool has_bias = bias.defined();
    std::vector<Tensor> inputs{x, kernel};
    if (has_bias) inputs.push_back(bias);
    autodiff::record(
        "conv2d", inputs, {y}, [x, kernel, options, need_dx, need_dk, has_bias](const Grads& g) {
          Grads out{
              need_dx ? ops::conv2d_backward_input(g[0], kernel, x.shape(), options) : Tensor(),
              need_dk ? ops::conv2d_backward_kernel(g[0], x, kernel.shape(), options) : Tensor()};
          if (has_bias) out.push_back(ops::conv2d_backward_bias(g[0]));
          return out;
        });
  }
  return y;
}

Tensor conv2d_relu(const Tensor& x, const Tensor& kernel, const Tensor& bias,
                   const ops::Conv2DOptions& options) {
  Tensor y = ops::conv2d_relu_forward(x, kernel, bias, options);
  if (autodiff::should_record({&x, &kernel, &bias})) {
    const bool need_dx = autodiff::should_record({&x});
    const bool need_dk = autodiff::should_record({&kernel});
    const bool has_bias = bias.defined();
    std::vector<Tensor> inputs{x, kernel};
    if (has_bias) inputs.push_back(bias);
    // Keeps y for relu's gradient; the convolution's backward passes need x and the kernel only.
    autodiff::record(
        "conv2d_relu", inputs, {y},
        [x, kernel, y, options, need_dx, need_dk, has_bias](const Grads& g) {
          ops::ConvReluGrad r = ops::conv2d_relu_backward_bias(g[0], y, has_bias);
          Grads out{
              need_dx ? ops::conv2d_backward_input(r.dz, kernel, x.shape(), options) : Tensor(),
              need_dk ? ops::conv2d_backward_kernel(r.dz, x, kernel.shape(), options) : Tensor()};
          if (has_bias) out.push_back(r.dbias);
          return out;
        });
  }
  return y;
}

}  // namespace lockstep
