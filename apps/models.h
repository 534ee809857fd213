#pragma once
// The models `lockstep train --model NAME` can build, in one table (models.cpp): a new model is one
// entry there, and the flag's choices and help text follow from it.
#include <string>
#include <vector>

#include "lockstep/keras/sequential.h"

namespace lockstep::apps {

struct ModelChoice {
  std::string name;
  std::string description;  // for --help, e.g. "the seed model, 784-128-10"
  // The layers after the uint8 [784] input and before the 10-way softmax output.
  std::vector<keras::LayerArg> (*hidden_layers)();
  // The learning-rate schedule `lockstep train` uses unless --learning-rate-schedule says
  // otherwise: "constant", or "cosine" (CosineDecay to 0 over all the steps of the run, as
  // transformer recipes train; it also settles the last epochs, whose test accuracy at a constant
  // rate moves by a point from one epoch to the next).
  std::string learning_rate_schedule = "constant";
};

// Every model, in the order --help lists them; the first is the default.
const std::vector<ModelChoice>& model_choices();
std::vector<std::string> model_names();
// "mlp (the seed model, 784-128-10), wide (...) or conv (...)".
std::string model_help();
// What the model reads: examples of `shape` (flattened to one vector) of `dtype`, multiplied by
// `scale` first (1/255: uint8 pixels to [0, 1]), and `classes` outputs.
struct ModelInput {
  std::vector<int64_t> shape = {28, 28, 1};
  DType dtype = DType::uint8;
  double scale = 1.0 / 255;
  int64_t classes = 10;
};
// The full layer list of model `name`: Input [prod(shape)] of `dtype`, Rescaling(scale) unless
// it is 1, the hidden layers, and a float32 Dense(classes, softmax). Throws InvalidArgument
// naming the choices for an unknown name, and for conv / vit on other than 28x28x1 images.
std::vector<keras::LayerArg> build_model_layers(const std::string& name,
                                                const ModelInput& input = {});
// The entry of model `name`; throws InvalidArgument naming the choices for an unknown name.
const ModelChoice& model_choice(const std::string& name);

}  // namespace lockstep::apps
