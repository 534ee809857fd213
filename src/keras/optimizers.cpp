#include "lockstep/keras/optimizers.h"

#include <algorithm>
#include <cctype>

#include "lockstep/core/error.h"

namespace lockstep::keras::optimizers {

std::unique_ptr<Optimizer> get(const std::string& name) {
  std::string key = name;
  std::transform(key.begin(), key.end(), key.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (key == "sgd") return std::make_unique<SGD>();
  if (key == "adam") return std::make_unique<Adam>();
  if (key == "adamw") return std::make_unique<AdamW>();
  if (key == "rmsprop") return std::make_unique<RMSprop>();
  if (key == "adagrad") return std::make_unique<Adagrad>();
  throw InvalidArgument(
      "optimizers::get: expected one of 'sgd', 'adam', 'adamw', 'rmsprop', 'adagrad'. Received: "
      "name='" +
      name + "'");
}

}  // namespace lockstep::keras::optimizers
