// Expected parameter counts are worked out by hand in each case's comment.
#include "conformance_transformer_cases.h"

#include "lockstep/keras/layers/attention.h"
#include "lockstep/keras/layers/global_pooling.h"
#include "lockstep/keras/layers/position_embedding.h"

namespace lockstep::keras::conformance {

std::vector<LayerCase> transformer_layer_cases() {
  using namespace layers;
  auto policy = [](DType d) { return std::string(dtype_name(d)); };
  std::vector<LayerCase> cases;
  cases.push_back({
      .name = "MultiHeadAttentionSelf",
      .make =
          [policy](DType d) {
            return MultiHeadAttention({.num_heads = 2, .key_dim = 3, .dtype = policy(d)})
                .move_to_shared();
          },
      .input_shapes = {{3, 5, 7}},
      // query/key/value kernels [7, 2, 3] + biases [2, 3]; output kernel [2, 3, 7] + bias [7]
      .expected_params = 3 * (7 * 2 * 3 + 2 * 3) + 2 * 3 * 7 + 7,
      .expected_weights = 8,
      .expected_trainable_weights = 8,
      .expected_config = {{"num_heads", 2},
                          {"key_dim", 3},
                          {"value_dim", 3},
                          {"dropout", 0.0},
                          {"use_bias", true},
                          {"output_shape", nullptr},
                          {"attention_axes", nullptr},
                          {"kernel_initializer", "glorot_uniform"},
                          {"bias_initializer", "zeros"},
                          {"dtype", "float32"}},
  });
  cases.push_back({
      .name = "MultiHeadAttentionCrossNoBias",
      .make =
          [policy](DType d) {
            return MultiHeadAttention({.num_heads = 3,
                                       .key_dim = 2,
                                       .value_dim = 4,
                                       .use_bias = false,
                                       .output_shape = 5,
                                       .dtype = policy(d)})
                .move_to_shared();
          },
      // query [2, 3, 7], value [2, 6, 5], key [2, 6, 3]
      .input_shapes = {{2, 3, 7}, {2, 6, 5}, {2, 6, 3}},
      // query [7, 3, 2], key [3, 3, 2], value [5, 3, 4], output [3, 4, 5]
      .expected_params = 7 * 3 * 2 + 3 * 3 * 2 + 5 * 3 * 4 + 3 * 4 * 5,
      .expected_weights = 4,
      .expected_trainable_weights = 4,
      .expected_config = {{"num_heads", 3},
                          {"key_dim", 2},
                          {"value_dim", 4},
                          {"use_bias", false},
                          {"output_shape", 5}},
  });
  cases.push_back({
      .name = "MultiHeadAttentionDropoutTraining",
      .make =
          [policy](DType d) {
            return MultiHeadAttention({.num_heads = 2,
                                       .key_dim = 2,
                                       .dropout = 0.3,
                                       .seed = 5,
                                       .dtype = policy(d)})
                .move_to_shared();
          },
      .input_shapes = {{2, 4, 3}, {2, 5, 3}},
      // query/key/value kernels [3, 2, 2] + biases [2, 2]; output kernel [2, 2, 3] + bias [3]
      .expected_params = 3 * (3 * 2 * 2 + 2 * 2) + 2 * 2 * 3 + 3,
      .expected_weights = 8,
      .expected_trainable_weights = 8,
      .expected_config = {{"dropout", 0.3}, {"seed", 5}},
      .training = true,
      .fresh_layer_per_call = true,
  });
  cases.push_back({
      .name = "GlobalAveragePooling1D",
      .make =
          [policy](DType d) {
            return GlobalAveragePooling1D({.dtype = policy(d)}).move_to_shared();
          },
      .input_shapes = {{3, 5, 7}},
      .expected_config = {{"data_format", "channels_last"}, {"keepdims", false}},
  });
  cases.push_back({
      .name = "GlobalAveragePooling1DKeepdims",
      .make =
          [policy](DType d) {
            return GlobalAveragePooling1D({.keepdims = true, .dtype = policy(d)}).move_to_shared();
          },
      .input_shapes = {{2, 3, 5}},
      .expected_config = {{"keepdims", true}},
  });
  cases.push_back({
      .name = "PositionEmbedding",
      .make =
          [policy](DType d) {
            return PositionEmbedding({.sequence_length = 7, .dtype = policy(d)}).move_to_shared();
          },
      .input_shapes = {{3, 5, 4}},  // 5 of the 7 positions
      .expected_params = 7 * 4,     // embeddings [7, 4]
      .expected_weights = 1,
      .expected_trainable_weights = 1,
      .expected_config = {{"sequence_length", 7}, {"initializer", "glorot_uniform"}},
  });
  return cases;
}

}  // namespace lockstep::keras::conformance
