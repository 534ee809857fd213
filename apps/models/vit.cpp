#include "vit.h"

#include "lockstep/keras/layers.h"
#include "lockstep/keras/model.h"

namespace lockstep::apps::models {

std::shared_ptr<keras::Layer> vit_encoder(const VitOptions& o) {
  using namespace keras::layers;
  const int64_t side = o.image_size / o.patch_size, tokens = side * side;
  auto inputs = keras::Input({o.image_size * o.image_size});
  auto x = Reshape({o.image_size, o.image_size, 1})(inputs);
  // Patch extraction and projection in one: a convolution with stride = patch size.
  x = Conv2D({.filters = o.width,
              .kernel_size = {o.patch_size, o.patch_size},
              .strides = {o.patch_size, o.patch_size}})(x);
  x = Reshape({tokens, o.width})(x);
  x = Add()({x, PositionEmbedding({.sequence_length = tokens})(x)});
  for (int64_t b = 0; b < o.blocks; ++b) {
    auto h = LayerNormalization({.epsilon = o.layer_norm_epsilon})(x);
    h = MultiHeadAttention({.num_heads = o.heads, .key_dim = o.width / o.heads})({h, h});
    x = Add()({x, h});
    h = LayerNormalization({.epsilon = o.layer_norm_epsilon})(x);
    h = Dense({.units = o.mlp_ratio * o.width, .activation = "gelu"})(h);
    h = Dense({.units = o.width})(h);
    x = Add()({x, h});
  }
  x = LayerNormalization({.epsilon = o.layer_norm_epsilon})(x);
  x = GlobalAveragePooling1D()(x);
  return std::make_shared<keras::Model>(inputs, x, "vit");
}

}  // namespace lockstep::apps::models
