#pragma once
// The vision transformer of `lockstep train --model vit`: Keras' image classification with a
// ViT, sized for 28x28 Fashion-MNIST.
//
//   pixels [B, 784] -> Reshape [28, 28, 1] -> Conv2D(width, patch x patch, stride patch)
//     -> Reshape [tokens, width] -> + PositionEmbedding
//     -> blocks x { x + MultiHeadAttention(LayerNorm(x)); x + MLP(LayerNorm(x)) }   (pre-norm)
//     -> LayerNorm -> GlobalAveragePooling1D -> [B, width]
// MLP: Dense(mlp_ratio * width, gelu) -> Dense(width). key_dim = width / heads.
#include <cstdint>
#include <memory>

#include "lockstep/keras/layer.h"

namespace lockstep::apps::models {

struct VitOptions {
  int64_t image_size = 28;
  int64_t patch_size = 4;  // 7 x 7 = 49 tokens
  int64_t width = 64;
  int64_t heads = 4;
  int64_t blocks = 4;
  int64_t mlp_ratio = 2;
  double layer_norm_epsilon = 1e-6;  // the ViT's (Keras' ViT example uses it too)
};

// A functional model from [B, image_size²] pixels (already scaled to [0, 1]) to [B, width]
// features; the caller adds the classifier.
std::shared_ptr<keras::Layer> vit_encoder(const VitOptions& options = {});

}  // namespace lockstep::apps::models
