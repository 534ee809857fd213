#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/nn_functions.h"

namespace lockstep {

Tensor embedding_lookup(const Tensor& table, const Tensor& ids) {
  Tensor y = ops::embedding_lookup_forward(table, ids);
  if (autodiff::should_record({&table})) {
    autodiff::record("embedding_lookup", {table}, {y},
                     [ids, vocab = table.dim(0)](const std::vector<Tensor>& g) {
                       return std::vector<Tensor>{ops::embedding_lookup_backward(g[0], ids, vocab)};
                     });
  }
  return y;
}

}  // namespace lockstep
