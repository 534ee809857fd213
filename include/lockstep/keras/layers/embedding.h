#pragma once
// Embedding: ids -> rows of a trainable table (keras.layers.Embedding).
//
//   embeddings [input_dim, output_dim]
//   ids S (any shape) -> S + [output_dim],   y[s, :] = embeddings[ids[s], :]
//
// ids are int32 or int64; float ids are truncated to int64 first (Keras casts non-integer inputs
// to int32 the same way). An id outside [0, input_dim) throws InvalidArgument. Only the table
// gets a gradient (a scatter-add of the output gradient).
// Not supported (Keras options): mask_zero, embeddings_regularizer / constraint, lora_rank.
#include <cstdint>
#include <string>

#include "lockstep/keras/layers/embedding_layer.h"

namespace lockstep::keras {

namespace initializers {

// keras.initializers.RandomUniform(minval, maxval): U(minval, maxval) from the global seeded
// stream (see initializers.h). Keras' string "uniform" means RandomUniform(-0.05, 0.05).
class RandomUniform : public Initializer {
 public:
  explicit RandomUniform(double minval = -0.05, double maxval = 0.05);
  Tensor operator()(const Shape& shape, DType dtype = DType::float32) const override;
  std::string name() const override { return "random_uniform"; }
  double minval() const { return minval_; }
  double maxval() const { return maxval_; }

 private:
  double minval_, maxval_;
};

}  // namespace initializers

namespace layers {

struct EmbeddingOptions {
  int64_t input_dim = 0;   // vocabulary size
  int64_t output_dim = 0;  // embedding width
  // "uniform" / "random_uniform" (RandomUniform(-0.05, 0.05), Keras' default) or any name
  // initializers::get accepts.
  std::string embeddings_initializer = "uniform";
  // The dtype policy ("" = global): the table has its variable dtype, the output its compute dtype.
  std::string dtype = "";
  std::string name = "";
};

class Embedding : public EmbeddingLayer<Embedding, EmbeddingOptions> {
 public:
  explicit Embedding(EmbeddingOptions options);
  std::string class_name() const override { return "Embedding"; }
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& inputs, bool training) override;
  Shape compute_output_shape(const Shape& input_shape) const override;
  nlohmann::json get_config() const override;
};

}  // namespace layers
}  // namespace lockstep::keras
