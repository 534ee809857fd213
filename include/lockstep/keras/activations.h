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
// The fused kind for `name` if the linear kernel can apply it, else ops::FusedActivation::none.
ops::FusedActivation fused_kind(const std::string& name);
bool is_fusable(const std::string& name);

// Keras' `_keras_logits`: the "softmax" activation remembers, per thread, the logits of its most
// recent output, and the categorical cross-entropy losses (from_logits = false) given exactly that
// output compute from the logits instead — as tf.keras does when the predictions come from a
// softmax: the same loss without the probability clipping (log of a probability that underflowed
// to 0 is the logit gap, not -log(1e-7)), and a backward pass of softmax(z) - y instead of a
// division by each probability followed by softmax's backward. Returns the logits and forgets them
// when `probabilities` is that output (the same storage, offset and shape), else an undefined
// Tensor.
Tensor take_softmax_logits(const Tensor& probabilities);

}  // namespace lockstep::keras::activations
