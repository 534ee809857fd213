#pragma once
// Activations by Keras name: "linear" (none), "relu", "sigmoid", "tanh", "gelu", "softmax",
// "log_softmax". Dense fuses relu/sigmoid/tanh/gelu into its matmul (one oneDNN call).
#include <functional>
#include <string>

#include "lockstep/core/tensor.h"
#include "lockstep/ops/linear.h"

namespace lockstep::keras::activations {

using ActivationFn = std::function<Tensor(const Tensor&)>;

// Throws InvalidArgument naming the accepted names.
ActivationFn get(const std::string& name);
// The fused kind for `name` if the linear kernel can apply it, else Activation::none.
Activation fused_kind(const std::string& name);
bool is_fusable(const std::string& name);

}  // namespace lockstep::keras::activations
