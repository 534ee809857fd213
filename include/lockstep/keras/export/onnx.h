#pragma once
// ONNX export of a model's inference graph (serving outside Lockstep), built with Debian's ONNX
// library (the ONNX protobuf messages) and checked in the tests by ONNX Runtime and
// onnx.checker.check_model(full_check=True).
//
//   keras::export_onnx(model, "m.onnx", {.opset = 17});
//
// The graph has one input, "input" [batch, ...] of the model's Input dtype (uint8 images stay
// uint8: Rescaling casts them), and one output, "output" [batch, ...] float32; the batch
// dimension is dynamic ("batch"). Weights are float32 initializers: a mixed_bfloat16 model exports
// a float32 graph of its float32 variables (its bfloat16 compute is not reproduced, so outputs
// differ from Lockstep's mixed_bfloat16 predictions by bfloat16 rounding). Nested models are
// inlined. Layers become (docs/keras-compat.md has the table):
//   Dense          MatMul, Add (bias), then the activation
//   activations    Relu, Sigmoid, Tanh, Softmax(axis=-1), LogSoftmax(axis=-1), identity; gelu
//                  (exact) as 0.5·x·(1 + Erf(x/√2)) (opset 17 has no Gelu)
//   Conv2D         Transpose to NCHW, Conv (TensorFlow's "same" padding as explicit pads),
//                  Transpose back to NHWC
//   MaxPooling2D   Transpose, MaxPool, Transpose
//   Flatten        Flatten(axis=1); Reshape: Reshape [0, target...]; Dropout: Identity
//   Rescaling      Cast (integer inputs), Mul, Add
//   BatchNormalization  (inference) Sub(moving_mean), Mul(gamma / sqrt(var + eps)), Add(beta)
//   LayerNormalization  LayerNormalization(axis=-1, epsilon)
//   Embedding      Cast to int64, Gather; PositionEmbedding: Expand of its first T rows
//   MultiHeadAttention  MatMul/Add projections, Reshape and Transpose to heads, MatMul of the
//                  scaled query with the keys, Softmax, MatMul with the values, the output
//                  projection (no masks: a graph with an attention_mask input is refused)
//   GlobalAveragePooling1D  ReduceMean(axes=[1]); Add: Add; Concatenate: Concat
// A layer with no export (a user's class) throws InvalidArgument naming it.
#include <string>

namespace lockstep::keras {

class Model;

struct OnnxExportOptions {
  int opset = 17;  // 13 to 17 (ReduceMean takes axes as an attribute up to 17)
};

void export_onnx(const Model& model, const std::string& path, OnnxExportOptions options = {});

}  // namespace lockstep::keras
