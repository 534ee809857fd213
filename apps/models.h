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
// The full layer list of model `name`: Input uint8[784], Rescaling(1/255), the hidden layers, and a
// float32 Dense(10, softmax). Throws InvalidArgument naming the choices for an unknown name.
std::vector<keras::LayerArg> build_model_layers(const std::string& name);
// The entry of model `name`; throws InvalidArgument naming the choices for an unknown name.
const ModelChoice& model_choice(const std::string& name);

}  // namespace lockstep::apps
