#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/transformer_functions.h"
#include "lockstep/ops/batch_matmul.h"
#include "lockstep/ops/gelu.h"
#include "lockstep/ops/masked_softmax.h"

namespace lockstep {

using Grads = std::vector<Tensor>;

Tensor batch_matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  Tensor y = ops::batch_matmul_forward(a, b, transpose_a, transpose_b);
  if (autodiff::should_record({&a, &b})) {
    const bool need_da = autodiff::should_record({&a}), need_db = autodiff::should_record({&b});
    autodiff::record("batch_matmul", {a, b}, {y},
                     [a, b, transpose_a, transpose_b, need_da, need_db](const Grads& g) {
                       ops::BatchMatmulGrads d = ops::batch_matmul_backward(
                           g[0], a, b, transpose_a, transpose_b, need_da, need_db);
                       return Grads{d.da, d.db};
                     });
  }
  return y;
}

Tensor masked_softmax(const Tensor& x, const Tensor& mask) {
  Tensor y = ops::masked_softmax_forward(x, mask);
  if (autodiff::should_record({&x})) {
    autodiff::record("masked_softmax", {x}, {y}, [y, mask](const Grads& g) {
      return Grads{ops::masked_softmax_backward(g[0], y, mask)};
    });
  }
  return y;
}

Tensor gelu_tanh(const Tensor& x) {
  Tensor y = ops::gelu_tanh_forward(x);
  if (autodiff::should_record({&x})) {
    autodiff::record("gelu_tanh", {x}, {y},
                     [x](const Grads& g) { return Grads{ops::gelu_tanh_backward(g[0], x)}; });
  }
  return y;
}

Tensor dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                             const ops::AttentionOptions& options) {
  Tensor y = ops::dot_product_attention_forward(query, key, value, options);
  if (autodiff::should_record({&query, &key, &value})) {
    const bool nq = autodiff::should_record({&query}), nk = autodiff::should_record({&key}),
               nv = autodiff::should_record({&value});
    autodiff::record("dot_product_attention", {query, key, value}, {y},
                     [query, key, value, options, nq, nk, nv](const Grads& g) {
                       ops::AttentionGrads d = ops::dot_product_attention_backward(
                           g[0], query, key, value, options, nq, nk, nv);
                       return Grads{d.dquery, d.dkey, d.dvalue};
                     });
  }
  return y;
}

}  // namespace lockstep
