#pragma once
// EmbeddingLayer<Self, Options>: the base of the layers whose one weight is a learned table,
// `embeddings` (Embedding, PositionEmbedding). It keeps the options the layer was made with and
// the table; each layer creates the table in build() (their shapes differ) and reads it in call().
#include <string>
#include <utility>

#include "lockstep/keras/layer.h"

namespace lockstep::keras::layers {

template <typename Self, typename Options>
class EmbeddingLayer : public LayerImpl<Self> {
 public:
  // Embedding: [input_dim, output_dim]; PositionEmbedding: [sequence_length, features].
  const Variable& embeddings() const { return embeddings_; }

 protected:
  // `prefix` is the snake_case class name for automatic names ("embedding", "embedding_1", ...);
  // Options carries `name` and `dtype` as every layer's options do.
  EmbeddingLayer(Options options, const std::string& prefix)
      : LayerImpl<Self>(options.name, prefix, options.dtype), options_(std::move(options)) {}

  Options options_;
  Variable embeddings_;
};

}  // namespace lockstep::keras::layers
