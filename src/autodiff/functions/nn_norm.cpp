#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/nn_functions.h"

namespace lockstep {

using Grads = std::vector<Tensor>;

namespace {

// Inputs in the order x, gamma, beta, leaving out the undefined ones; the backward closure
// returns gradients in the same order.
std::vector<Tensor> present(const Tensor& x, const Tensor& gamma, const Tensor& beta) {
  std::vector<Tensor> inputs{x};
  if (gamma.defined()) inputs.push_back(gamma);
  if (beta.defined()) inputs.push_back(beta);
  return inputs;
}

Grads in_input_order(const ops::NormGrads& d, bool has_gamma, bool has_beta) {
  Grads out{d.x};
  if (has_gamma) out.push_back(d.gamma);
  if (has_beta) out.push_back(d.beta);
  return out;
}

}  // namespace

BatchNormOutput batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                           double epsilon) {
  ops::BatchNormResult r = ops::batch_norm_training(x, gamma, beta, epsilon);
  if (autodiff::should_record({&x, &gamma, &beta})) {
    autodiff::record(
        "batch_norm", present(x, gamma, beta), {r.output},
        [x, gamma, has_beta = beta.defined(), mean = r.mean, inv_std = r.inv_std](const Grads& g) {
          return in_input_order(ops::batch_norm_training_backward(g[0], x, gamma, mean, inv_std),
                                gamma.defined(), has_beta);
        });
  }
  return {r.output, r.mean, r.variance};
}

Tensor batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                            const Tensor& moving_mean, const Tensor& moving_variance,
                            double epsilon) {
  Tensor y =
      ops::batch_norm_inference_forward(x, gamma, beta, moving_mean, moving_variance, epsilon);
  if (autodiff::should_record({&x, &gamma, &beta})) {
    // The moving statistics change only in training mode, so the handles still hold this step's
    // values when the backward pass runs.
    autodiff::record("batch_norm_inference", present(x, gamma, beta), {y},
                     [x, gamma, has_beta = beta.defined(), mm = moving_mean, mv = moving_variance,
                      epsilon](const Grads& g) {
                       return in_input_order(
                           ops::batch_norm_inference_backward(g[0], x, gamma, mm, mv, epsilon),
                           gamma.defined(), has_beta);
                     });
  }
  return y;
}

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon,
                  bool bfloat16_values) {
  ops::LayerNormResult r = ops::layer_norm_forward(x, gamma, beta, epsilon, bfloat16_values);
  if (autodiff::should_record({&x, &gamma, &beta})) {
    autodiff::record("layer_norm", present(x, gamma, beta), {r.output},
                     [x, gamma, has_beta = beta.defined(), mean = r.mean, inv_std = r.inv_std,
                      bfloat16_values](const Grads& g) {
                       return in_input_order(
                           ops::layer_norm_backward(g[0], x, gamma, mean, inv_std, bfloat16_values),
                           gamma.defined(), has_beta);
                     });
  }
  return r.output;
}

}  // namespace lockstep
