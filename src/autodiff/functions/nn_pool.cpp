#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/nn_functions.h"

namespace lockstep {

Tensor max_pool2d(const Tensor& x, const ops::Pool2DOptions& options) {
  ops::MaxPool2DResult r = ops::max_pool2d_forward(x, options);
  if (autodiff::should_record({&x})) {
    // Keeps the indices and x's shape, not x.
    autodiff::record(
        "max_pool2d", {x}, {r.output},
        [argmax = r.argmax, shape = x.shape(), options](const std::vector<Tensor>& g) {
          return std::vector<Tensor>{ops::max_pool2d_backward(g[0], argmax, shape, options)};
        });
  }
  return r.output;
}

}  // namespace lockstep
