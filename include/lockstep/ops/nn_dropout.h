#pragma once
// Inverted dropout (as tf.nn.dropout and Keras' Dropout layer in training):
//
//   mask[i]   = 1 if u[i] >= rate else 0,   u[i] = generator.uniform() drawn in row-major order
//   output[i] = x[i] * mask[i] / (1 - rate)
//   grad_x[i] = grad_output[i] * mask[i] / (1 - rate)
//
// so the expected value of each output equals its input and inference needs no rescaling. The
// mask comes from a Philox Generator: the same seed, stream and position give the same mask on
// every run, replica and resume (the generator advances by one word per element).
// rate must be in [0, 1). rate == 0 draws nothing, returns `x` itself and an undefined mask
// (the backward pass then passes the gradient through).
#include "lockstep/core/random.h"
#include "lockstep/core/tensor.h"

namespace lockstep::ops {

struct DropoutResult {
  Tensor output;  // x's shape and dtype
  Tensor mask;    // uint8, x's shape: 1 = kept; undefined when rate == 0
};

DropoutResult dropout_forward(const Tensor& x, double rate, Generator& generator);

// Applies a mask from `dropout` with the same rate (the backward pass, or the forward pass again).
Tensor dropout_backward(const Tensor& grad_output, const Tensor& mask, double rate);

}  // namespace lockstep::ops
