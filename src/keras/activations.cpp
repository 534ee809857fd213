#include "lockstep/keras/activations.h"

#include "lockstep/autodiff/functions.h"

namespace lockstep::keras::activations {

namespace {
// The most recent softmax activation on this thread: its output (kept alive, so that its storage
// cannot be reused by another tensor that would then be mistaken for it) and its logits.
struct SoftmaxLogits {
  Tensor output, logits;
};
thread_local SoftmaxLogits last_softmax;

Tensor softmax_keeping_logits(const Tensor& x) {
  Tensor y = softmax(x, -1);
  last_softmax = {y, x};
  return y;
}
}  // namespace

Tensor take_softmax_logits(const Tensor& probabilities) {
  const Tensor& out = last_softmax.output;
  if (!out.defined() || !probabilities.defined() || !probabilities.shares_storage_with(out) ||
      probabilities.raw_data() != out.raw_data() || !(probabilities.shape() == out.shape()) ||
      probabilities.dtype() != out.dtype()) {
    return Tensor();
  }
  Tensor logits = last_softmax.logits;
  last_softmax = {};
  return logits;
}

ActivationFn get(const std::string& name) {
  if (name.empty() || name == "linear") return [](const Tensor& x) { return x; };
  if (name == "relu") return [](const Tensor& x) { return relu(x); };
  if (name == "sigmoid") return [](const Tensor& x) { return sigmoid(x); };
  if (name == "tanh") return [](const Tensor& x) { return lockstep::tanh(x); };
  if (name == "gelu") return [](const Tensor& x) { return gelu(x); };
  if (name == "softmax") return softmax_keeping_logits;
  if (name == "log_softmax") return [](const Tensor& x) { return log_softmax(x, -1); };
  throw InvalidArgument("Unknown activation '" + name +
                        "'. Expected one of linear, relu, sigmoid, tanh, gelu, softmax, "
                        "log_softmax.");
}

bool is_fusable(const std::string& name) {
  return name.empty() || name == "linear" || name == "relu" || name == "sigmoid" ||
         name == "tanh" || name == "gelu";
}

ops::FusedActivation fused_kind(const std::string& name) {
  if (name == "relu") return ops::FusedActivation::relu;
  if (name == "sigmoid") return ops::FusedActivation::sigmoid;
  if (name == "tanh") return ops::FusedActivation::tanh;
  if (name == "gelu") return ops::FusedActivation::gelu;
  return ops::FusedActivation::none;
}

}  // namespace lockstep::keras::activations
