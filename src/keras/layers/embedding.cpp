#include "lockstep/keras/layers/embedding.h"

#include <nlohmann/json.hpp>

#include "lockstep/autodiff/nn_functions.h"
#include "lockstep/core/check.h"

namespace lockstep::keras {

namespace initializers {

RandomUniform::RandomUniform(double minval, double maxval) : minval_(minval), maxval_(maxval) {
  LOCKSTEP_CHECK(minval < maxval,
                 "RandomUniform: expected minval < maxval. Received: minval=", minval,
                 ", maxval=", maxval, ".");
}

Tensor RandomUniform::operator()(const Shape& shape, DType dtype) const {
  Generator g(next_seed());
  return g.uniform(shape, minval_, maxval_, dtype);
}

}  // namespace initializers

namespace layers {

namespace {

std::shared_ptr<initializers::Initializer> embedding_initializer(const std::string& name) {
  if (name == "uniform" || name == "random_uniform")
    return std::make_shared<initializers::RandomUniform>(-0.05, 0.05);
  return initializers::get(name);
}

}  // namespace

Embedding::Embedding(EmbeddingOptions options) : EmbeddingLayer(std::move(options), "embedding") {
  LOCKSTEP_CHECK(options_.input_dim > 0 && options_.output_dim > 0,
                 "Embedding: expected input_dim > 0 and output_dim > 0. Received: input_dim=",
                 options_.input_dim, ", output_dim=", options_.output_dim, ".");
  embedding_initializer(options_.embeddings_initializer);
}

void Embedding::build(const Shape&) {
  embeddings_ =
      add_weight("embeddings", {options_.input_dim, options_.output_dim},
                 *embedding_initializer(options_.embeddings_initializer), true, variable_dtype());
}

Tensor Embedding::call(const Tensor& inputs, bool) {
  const bool integer = inputs.dtype() == DType::int32 || inputs.dtype() == DType::int64;
  // The table is cast before the lookup (Keras casts the looked-up rows; the values are the same
  // and the cast's gradient keeps the float32 table's gradient float32).
  return embedding_lookup(autocast(embeddings_), integer ? inputs : inputs.to(DType::int64));
}

Shape Embedding::compute_output_shape(const Shape& input_shape) const {
  Shape out = input_shape;
  out.push_back(options_.output_dim);
  return out;
}

nlohmann::json Embedding::get_config() const {
  auto c = Layer::get_config();
  c["input_dim"] = options_.input_dim;
  c["output_dim"] = options_.output_dim;
  c["embeddings_initializer"] = options_.embeddings_initializer;
  c["mask_zero"] = false;
  c["dtype"] = dtype_policy().name();
  return c;
}

}  // namespace layers
}  // namespace lockstep::keras
