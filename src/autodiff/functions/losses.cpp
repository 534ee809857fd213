#include "lockstep/autodiff/losses.h"

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/ops/losses.h"

namespace lockstep {

using Grads = std::vector<Tensor>;

Tensor categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits,
                                int axis) {
  Tensor loss = ops::categorical_crossentropy_forward(y_true, y_pred, from_logits, axis);
  if (autodiff::should_record({&y_pred})) {
    autodiff::record("categorical_crossentropy", {y_pred}, {loss},
                     [y_true, y_pred, from_logits, axis](const Grads& g) {
                       return Grads{ops::categorical_crossentropy_backward(g[0], y_true, y_pred,
                                                                           from_logits, axis)};
                     });
  }
  return loss;
}

Tensor softmax_crossentropy(const Tensor& y_true, const Tensor& logits,
                            const Tensor& probabilities) {
  Tensor loss = ops::softmax_crossentropy_forward(y_true, logits, probabilities);
  if (autodiff::should_record({&logits})) {
    autodiff::record(
        "softmax_crossentropy", {logits}, {loss}, [y_true, probabilities](const Grads& g) {
          return Grads{ops::softmax_crossentropy_backward(g[0], y_true, probabilities)};
        });
  }
  return loss;
}

Tensor sparse_categorical_crossentropy(const Tensor& labels, const Tensor& y_pred,
                                       bool from_logits) {
  Tensor loss = ops::sparse_categorical_crossentropy_forward(labels, y_pred, from_logits);
  if (autodiff::should_record({&y_pred})) {
    autodiff::record("sparse_categorical_crossentropy", {y_pred}, {loss},
                     [labels, y_pred, from_logits](const Grads& g) {
                       return Grads{ops::sparse_categorical_crossentropy_backward(
                           g[0], labels, y_pred, from_logits)};
                     });
  }
  return loss;
}

Tensor binary_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits) {
  Tensor loss = ops::binary_crossentropy_forward(y_true, y_pred, from_logits);
  if (autodiff::should_record({&y_pred})) {
    autodiff::record(
        "binary_crossentropy", {y_pred}, {loss}, [y_true, y_pred, from_logits](const Grads& g) {
          return Grads{ops::binary_crossentropy_backward(g[0], y_true, y_pred, from_logits)};
        });
  }
  return loss;
}

Tensor mean_squared_error(const Tensor& y_true, const Tensor& y_pred) {
  Tensor loss = ops::mean_squared_error_forward(y_true, y_pred);
  if (autodiff::should_record({&y_true, &y_pred})) {
    autodiff::record("mean_squared_error", {y_true, y_pred}, {loss},
                     [y_true, y_pred](const Grads& g) {
                       auto d = ops::mean_squared_error_backward(g[0], y_true, y_pred);
                       return Grads{d.dy_true, d.dy_pred};
                     });
  }
  return loss;
}

Tensor mean_absolute_error(const Tensor& y_true, const Tensor& y_pred) {
  Tensor loss = ops::mean_absolute_error_forward(y_true, y_pred);
  if (autodiff::should_record({&y_true, &y_pred})) {
    autodiff::record("mean_absolute_error", {y_true, y_pred}, {loss},
                     [y_true, y_pred](const Grads& g) {
                       auto d = ops::mean_absolute_error_backward(g[0], y_true, y_pred);
                       return Grads{d.dy_true, d.dy_pred};
                     });
  }
  return loss;
}

}  // namespace lockstep
