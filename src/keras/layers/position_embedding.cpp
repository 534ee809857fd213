#include "lockstep/keras/layers/position_embedding.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/core/check.h"
#include "lockstep/ops/reduce.h"

namespace lockstep::keras::layers {

namespace {

// The first `t` rows of table [L, D], repeated `batch` times -> [batch, t, D]. Gradient: the sum
// over the batch on those rows, zeros on the others.
Tensor leading_rows_over_batch(const Tensor& table, int64_t t, int64_t batch) {
  const int64_t L = table.dim(0), D = table.dim(1);
  Tensor y({batch, t, D}, table.dtype());
  const size_t bytes = static_cast<size_t>(t * D) * dtype_size(table.dtype());
  for (int64_t b = 0; b < batch; ++b) {
    std::memcpy(static_cast<char*>(y.raw_data()) + static_cast<size_t>(b) * bytes, table.raw_data(),
                bytes);
  }
  if (autodiff::should_record({&table})) {
    autodiff::record("position_embedding", {table}, {y},
                     [L, t, bytes](const std::vector<Tensor>& g) {
                       Tensor sum = ops::reduce_sum_forward(g[0], {0});  // [t, D]
                       if (t == L) return std::vector<Tensor>{sum};
                       Tensor full = Tensor::zeros({L, sum.dim(1)}, sum.dtype());
                       std::memcpy(full.raw_data(), sum.raw_data(), bytes);
                       return std::vector<Tensor>{full};
                     });
  }
  return y;
}

}  // namespace

PositionEmbedding::PositionEmbedding(PositionEmbeddingOptions options)
    : EmbeddingLayer(std::move(options), "position_embedding") {
  LOCKSTEP_CHECK(options_.sequence_length > 0,
                 "PositionEmbedding: expected sequence_length > 0. Received: sequence_length=",
                 options_.sequence_length, ".");
  initializers::get(options_.initializer);
}

Shape PositionEmbedding::compute_output_shape(const Shape& input_shape) const {
  LOCKSTEP_CHECK(
      input_shape.rank() == 3 && input_shape[1] <= options_.sequence_length, "PositionEmbedding '",
      name(), "' expects inputs [batch, sequence, features] with at most ",
      options_.sequence_length, " positions (sequence_length). Received shape ", input_shape, ".");
  return input_shape;
}

void PositionEmbedding::build(const Shape& input_shape) {
  compute_output_shape(input_shape);
  embeddings_ = add_weight("embeddings", {options_.sequence_length, input_shape[2]},
                           *initializers::get(options_.initializer), true, variable_dtype());
}

Tensor PositionEmbedding::call(const Tensor& inputs, bool) {
  compute_output_shape(inputs.shape());
  const int64_t T = inputs.dim(1), D = embeddings_.shape()[1];
  LOCKSTEP_CHECK(inputs.dim(2) == D, "PositionEmbedding '", name(), "' expects ", D,
                 " features (its embeddings are ", embeddings_.shape(),
                 "). Received: ", inputs.describe(), ".");
  return leading_rows_over_batch(autocast(embeddings_), T, inputs.dim(0));
}

nlohmann::json PositionEmbedding::get_config() const {
  auto c = Layer::get_config();
  c["sequence_length"] = options_.sequence_length;
  c["initializer"] = options_.initializer;
  c["dtype"] = dtype_policy().name();
  return c;
}

}  // namespace lockstep::keras::layers
