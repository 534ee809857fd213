#pragma once
// Embedding lookup (tf.nn.embedding_lookup; Keras' Embedding layer):
//
//   table   [vocab, dim]            float32, bfloat16 or float64
//   ids     S (any shape)           int32 or int64, each in [0, vocab)
//   output  S + [dim]               output[s, :] = table[ids[s], :]
//
// The backward pass is a scatter-add into a dense gradient (rows of ids that repeat accumulate):
//   grad_table[v, :] = sum_{s : ids[s] == v} grad_output[s, :]
// bfloat16 gradients are summed in float32 and rounded once.
// An id outside [0, vocab) throws InvalidArgument naming the id, its position and vocab.
#include <cstdint>

#include "lockstep/core/tensor.h"

namespace lockstep::ops {

Tensor embedding_lookup_forward(const Tensor& table, const Tensor& ids);

// grad_table [vocab_size, dim] in grad_output's dtype; grad_output is ids.shape() + [dim].
Tensor embedding_lookup_backward(const Tensor& grad_output, const Tensor& ids, int64_t vocab_size);

}  // namespace lockstep::ops
