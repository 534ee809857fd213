#pragma once
// Differentiable neural-network ops for the Keras layers Conv2D, MaxPooling2D,
// BatchNormalization, LayerNormalization, Embedding and Dropout: each runs the forward kernel of
// lockstep/ops/nn_*.h and, when a recording tape tracks an input, records the matching backward
// kernel. Shapes, layouts and formulas are documented in those headers.
//
//   Tensor y = conv2d(x, kernel.value(), bias.value(), {.strides = {2, 2}, .padding =
//   ops::Padding::same}); y = max_pool2d(relu(y), {.pool_size = {2, 2}});
//
// Undefined optional tensors (bias, gamma, beta) are simply absent: no gradient is recorded for
// them. Integer ids and the statistics returned for moving averages are not differentiated.
#include "lockstep/core/random.h"
#include "lockstep/core/tensor.h"
#include "lockstep/ops/nn_conv.h"
#include "lockstep/ops/nn_dropout.h"
#include "lockstep/ops/nn_embedding.h"
#include "lockstep/ops/nn_norm.h"
#include "lockstep/ops/nn_pool.h"

namespace lockstep {

// x [N, H, W, C_in], kernel [KH, KW, C_in, C_out], bias [C_out] or undefined -> [N, OH, OW, C_out]
Tensor conv2d(const Tensor& x, const Tensor& kernel, const Tensor& bias = Tensor(),
              const ops::Conv2DOptions& options = {});

// relu(conv2d(x, kernel, bias)) as one op (ops::conv2d_relu_forward): relu runs inside the
// convolution where it can, and its gradient and the bias gradient take one pass (Keras' Conv2D
// with activation="relu").
Tensor conv2d_relu(const Tensor& x, const Tensor& kernel, const Tensor& bias = Tensor(),
                   const ops::Conv2DOptions& options = {});

// x [N, H, W, C] -> [N, OH, OW, C]
Tensor max_pool2d(const Tensor& x, const ops::Pool2DOptions& options = {});

// Training mode: normalizes with the batch statistics (per channel = last axis) and returns them
// for the layer's moving averages:
//   moving_mean = moving_mean * momentum + mean * (1 - momentum)    (same for variance; Keras
//   uses the biased batch variance here too)
struct BatchNormOutput {
  Tensor output;    // differentiable
  Tensor mean;      // [C], not differentiated
  Tensor variance;  // [C], biased, not differentiated
};
BatchNormOutput batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                           double epsilon = ops::kKerasNormEpsilon);

// Inference mode: normalizes with the moving statistics (constants; only x, gamma, beta get
// gradients).
Tensor batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                            const Tensor& moving_mean, const Tensor& moving_variance,
                            double epsilon = ops::kKerasNormEpsilon);

// Normalizes over the last axis; gamma, beta [D] or undefined. bfloat16_values (float32 x;
// ops::layer_norm_forward): mixed_bfloat16's float32 form — float32 arithmetic, the output and
// its gradient rounded to bfloat16 values as the kernels store and read them.
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                  double epsilon = ops::kKerasNormEpsilon, bool bfloat16_values = false);

// table [vocab, dim], ids int32/int64 of any shape S -> S + [dim]; gradient flows to table only.
Tensor embedding_lookup(const Tensor& table, const Tensor& ids);

// Inverted dropout with a mask drawn from `generator` (see ops/nn_dropout.h); the backward pass
// reuses the forward mask. Call it only in training (Keras' Dropout is the identity otherwise).
Tensor dropout(const Tensor& x, double rate, Generator& generator);

}  // namespace lockstep
