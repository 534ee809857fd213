#include "models.h"
#include "models/vit.h"

#include "lockstep/core/error.h"
#include "lockstep/keras.h"
#if __has_include("lockstep/keras/layers/convolutional.h")
#include "lockstep/keras/layers/convolutional.h"
#endif

namespace lockstep::apps {
namespace {

std::vector<keras::LayerArg> mlp() {
  return {keras::layers::Dense({.units = 128, .activation = "relu"})};
}

// Compute-bound: two wide hidden layers.
std::vector<keras::LayerArg> wide() {
  return {keras::layers::Dense({.units = 2048, .activation = "relu"}),
          keras::layers::Dense({.units = 2048, .activation = "relu"})};
}

std::vector<keras::LayerArg> conv() {
  return {keras::layers::Reshape({28, 28, 1}),
          keras::layers::Conv2D({.filters = 32, .kernel_size = {3, 3}, .activation = "relu"}),
          keras::layers::MaxPooling2D(), keras::layers::Flatten()};
}

// apps/models/vit.h: the encoder as one functional layer, then the shared classifier.
std::vector<keras::LayerArg> vit() {
  return {models::vit_encoder()};
}

}  // namespace

const std::vector<ModelChoice>& model_choices() {
  static const std::vector<ModelChoice> choices = {
      {"mlp", "the seed model, 784-128-10", mlp},
      {"wide", "784-2048-2048-10", wide},
      {"conv", "a small convnet", conv},
      {"vit", "a vision transformer: 4x4 patches, width 64, 4 heads, 4 blocks", vit, "cosine"},
  };
  return choices;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ModelChoice& m : model_choices()) names.push_back(m.name);
  return names;
}

std::string model_help() {
  const auto& choices = model_choices();
  std::string out;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i) out += i + 1 == choices.size() ? " or " : ", ";
    out += choices[i].name + " (" + choices[i].description + ")";
  }
  return out;
}

const ModelChoice& model_choice(const std::string& name) {
  for (const ModelChoice& m : model_choices()) {
    if (m.name == name) return m;
  }
  throw InvalidArgument("--model: expected " + model_help() + ". Received: '" + name + "'.");
}

std::vector<keras::LayerArg> build_model_layers(const std::string& name, const ModelInput& input) {
  const ModelChoice& m = model_choice(name);
  int64_t flat = 1;
  for (int64_t d : input.shape) flat *= d;
  if (m.name == "conv" || m.name == "vit") {
    // Their first layers reshape to 28x28x1 images (models/vit.h: 4x4 patches of them).
    if (input.shape != std::vector<int64_t>{28, 28, 1}) {
      throw InvalidArgument("--model " + m.name +
                            " reads 28x28x1 images; the data's examples are " +
                            Shape(input.shape).to_string() + ". Use mlp or wide.");
    }
  }
  std::vector<keras::LayerArg> layers = {keras::Input({flat}, input.dtype)};
  if (input.scale != 1.0) layers.push_back(keras::layers::Rescaling(input.scale));
  for (keras::LayerArg& layer : m.hidden_layers()) layers.push_back(std::move(layer));
  // The output layer stays float32 under mixed precision (Keras' idiom for softmax outputs).
  layers.push_back(
      keras::layers::Dense({.units = input.classes, .activation = "softmax", .dtype = "float32"}));
  return layers;
}

}  // namespace lockstep::apps
