#pragma once
// PositionEmbedding: a learned embedding per sequence position (keras_hub.layers.
// PositionEmbedding), the positional encoding of a vision transformer's patches.
//
//   embeddings [sequence_length, D] (trainable)
//   x [B, T, D] (T <= sequence_length) -> y [B, T, D],   y[b, t, :] = embeddings[t, :]
//
// Like keras_hub's layer it returns the embeddings, broadcast to the input's shape, not their
// sum with the input: a model adds them, `x = Add()({x, PositionEmbedding(...)(x)})`. Only the
// embeddings get a gradient (the sum over the batch of the output's); the input's values are not
// used. The output has the layer's compute dtype.
// Not supported (keras_hub options): start_index, a sequence axis other than 1.
#include <cstdint>
#include <string>

#include "lockstep/keras/layers/embedding_layer.h"

namespace lockstep::keras::layers {

struct PositionEmbeddingOptions {
  int64_t sequence_length = 0;  // the longest sequence (number of patches) it embeds
  std::string initializer = "glorot_uniform";
  std::string dtype = "";  // the dtype policy ("" = global)
  std::string name = "";
};

class PositionEmbedding : public EmbeddingLayer<PositionEmbedding, PositionEmbeddingOptions> {
 public:
  explicit PositionEmbedding(PositionEmbeddingOptions options);
  std::string class_name() const override { return "PositionEmbedding"; }
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& inputs, bool training) override;
  Shape compute_output_shape(const Shape& input_shape) const override;
  nlohmann::json get_config() const override;
};

}  // namespace lockstep::keras::layers
