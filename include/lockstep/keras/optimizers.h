#pragma once
// Umbrella header of keras.optimizers (and keras.optimizers.schedules), and
// keras.optimizers.get: an optimizer by its Keras name.
#include <memory>
#include <string>

#include "lockstep/keras/optimizers/adagrad.h"
#include "lockstep/keras/optimizers/adam.h"
#include "lockstep/keras/optimizers/adamw.h"
#include "lockstep/keras/optimizers/optimizer.h"
#include "lockstep/keras/optimizers/rmsprop.h"
#include "lockstep/keras/optimizers/schedules/learning_rate_schedule.h"
#include "lockstep/keras/optimizers/sgd.h"

namespace lockstep::keras::optimizers {

// keras.optimizers.get("adam"): an optimizer with Keras' defaults from its name
// (case-insensitive: "sgd", "adam", "adamw", "rmsprop", "adagrad"). Throws InvalidArgument.
std::unique_ptr<Optimizer> get(const std::string& name);

}  // namespace lockstep::keras::optimizers
