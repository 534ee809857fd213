#pragma once
// The built-in classes' factories, registered once before the first lookup
// (object_registration.cpp).
namespace lockstep::keras::saving::internal {

// builtin_layers.cpp: every layer in lockstep/keras/layers.h, Sequential and Functional.
void register_builtin_layers();
// builtin_objects.cpp: losses, metrics, optimizers and learning-rate schedules.
void register_builtin_objects();

}  // namespace lockstep::keras::saving::internal

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "lockstep/core/dtype.h"

namespace lockstep::keras::saving::internal {

// "float32" -> DType::float32; InvalidArgument for another name.
DType dtype_from_name(const std::string& name);
// An InputLayer config's batch_shape (or Keras 2's batch_input_shape), null batch read as 0.
std::vector<int64_t> batch_shape_of(const nlohmann::json& config);

}  // namespace lockstep::keras::saving::internal
