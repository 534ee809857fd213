#include <functional>

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/nn_functions.h"

namespace lockstep {

using Grads = std::vector<Tensor>;

namespace {

// Records y as a convolution of x by kernel (+ bias) whose output gradient dy first becomes the
// convolution's own dz and bias gradient through `first_step` (conv2d: dy itself; conv2d_relu:
// relu's gradient), then reaches x and the kernel through the convolution's backward passes.
void record_convolution(
    const char* name, const Tensor& x, const Tensor& kernel, const Tensor& bias, const Tensor& y,
    const ops::Conv2DOptions& options,
    std::function<ops::ConvReluGrad(const Tensor& dy, bool with_bias)> first_step) {
  if (!autodiff::should_record({&x, &kernel, &bias})) return;
  // The first layer's input is data: skipping its gradient saves a whole transposed convolution.
  const bool need_dx = autodiff::should_record({&x});
  const bool need_dk = autodiff::should_record({&kernel});
  const bool has_bias = bias.defined();
  std::vector<Tensor> inputs{x, kernel};
  if (has_bias) inputs.push_back(bias);
  autodiff::record(
      name, inputs, {y},
      [x, kernel, options, need_dx, need_dk, has_bias,
       first_step = std::move(first_step)](const Grads& g) {
        const ops::ConvReluGrad r = first_step(g[0], has_bias);
        Grads out{
            need_dx ? ops::conv2d_backward_input(r.dz, kernel, x.shape(), options) : Tensor(),
            need_dk ? ops::conv2d_backward_kernel(r.dz, x, kernel.shape(), options) : Tensor()};
        if (has_bias) out.push_back(r.dbias);
        return out;
      });
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& kernel, const Tensor& bias,
              const ops::Conv2DOptions& options) {
  Tensor y = ops::conv2d_forward(x, kernel, bias, options);
  record_convolution("conv2d", x, kernel, bias, y, options, [](const Tensor& dy, bool with_bias) {
    return ops::ConvReluGrad{dy, with_bias ? ops::conv2d_backward_bias(dy) : Tensor()};
  });
  return y;
}

Tensor conv2d_relu(const Tensor& x, const Tensor& kernel, const Tensor& bias,
                   const ops::Conv2DOptions& options) {
  Tensor y = ops::conv2d_relu_forward(x, kernel, bias, options);
  // Keeps y for relu's gradient; the convolution's backward passes need x and the kernel only.
  record_convolution("conv2d_relu", x, kernel, bias, y, options,
                     [y](const Tensor& dy, bool with_bias) {
                       return ops::conv2d_relu_backward_bias(dy, y, with_bias);
                     });
  return y;
}

}  // namespace lockstep
