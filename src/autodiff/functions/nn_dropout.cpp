#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/nn_functions.h"

namespace lockstep {

Tensor dropout(const Tensor& x, double rate, Generator& generator) {
  ops::DropoutResult r = ops::dropout_forward(x, rate, generator);
  // rate == 0 hands back x itself: nothing to record, the gradient reaches x directly.
  if (!r.mask.defined()) return r.output;
  if (autodiff::should_record({&x})) {
    autodiff::record("dropout", {x}, {r.output},
                     [mask = r.mask, rate](const std::vector<Tensor>& g) {
                       return std::vector<Tensor>{ops::dropout_backward(g[0], mask, rate)};
                     });
  }
  return r.output;
}

}  // namespace lockstep
