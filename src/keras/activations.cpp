#include "lockstep/keras/activations.h"

#include "lockstep/autodiff/functions.h"

namespace lockstep::keras::activations {

ActivationFn get(const std::string& name) {
  if (name.empty() || name == "linear") return [](const Tensor& x) { return x; };
  if (name == "relu") return [](const Tensor& x) { return relu(x); };
  if (name == "sigmoid") return [](const Tensor& x) { return sigmoid(x); };
  if (name == "tanh") return [](const Tensor& x) { return lockstep::tanh(x); };
  if (name == "gelu") return [](const Tensor& x) { return gelu(x); };
  if (name == "softmax") return [](const Tensor& x) { return softmax(x, -1); };
  if (name == "log_softmax") return [](const Tensor& x) { return log_softmax(x, -1); };
  throw InvalidArgument("Unknown activation '" + name +
                        "'. Expected one of linear, relu, sigmoid, tanh, gelu, softmax, "
                        "log_softmax.");
}

bool is_fusable(const std::string& name) {
  return name.empty() || name == "linear" || name == "relu" || name == "sigmoid" ||
         name == "tanh" || name == "gelu";
}

Activation fused_kind(const std::string& name) {
  if (name == "relu") return Activation::relu;
  if (name == "sigmoid") return Activation::sigmoid;
  if (name == "tanh") return Activation::tanh;
  if (name == "gelu") return Activation::gelu;
  return Activation::none;
}

}  // namespace lockstep::keras::activations
