#include "lockstep/keras/layers/reshaping.h"

#include <nlohmann/json.hpp>

#include "lockstep/autodiff/functions.h"
#include "lockstep/core/check.h"

namespace lockstep::keras::layers {

Flatten::Flatten(const std::string& name) : LayerImpl(name, "flatten") {}

Shape Flatten::compute_output_shape(const Shape& s) const {
  int64_t n = 1;
  for (int i = 1; i < s.rank(); ++i) n *= s[i];
  return Shape{s.rank() ? s[0] : 1, n};
}

Tensor Flatten::call(const Tensor& inputs, bool) {
  return reshape(inputs, compute_output_shape(inputs.shape()));
}

Reshape::Reshape(std::vector<int64_t> target_shape, const std::string& name)
    : LayerImpl(name, "reshape"), target_(std::move(target_shape)) {
  int unknown = 0;
  for (int64_t d : target_) {
    if (d == -1) {
      ++unknown;
    } else {
      LOCKSTEP_CHECK(d >= 0, "Reshape: dimensions must be >= 0 or -1.");
    }
  }
  LOCKSTEP_CHECK(unknown <= 1, "Reshape: at most one dimension can be -1.");
}

Shape Reshape::resolve(const Shape& in) const {
  int64_t per_example = 1;
  for (int i = 1; i < in.rank(); ++i) per_example *= in[i];
  int64_t known = 1;
  for (int64_t d : target_)
    if (d != -1) known *= d;
  Shape out{in.rank() ? in[0] : 0};
  for (int64_t d : target_) {
    if (d == -1) {
      LOCKSTEP_CHECK(known != 0 && per_example % known == 0, "Reshape '", name(),
                     "': cannot reshape ", in.to_string(), " to a target with ", known,
                     " elements.");
      out.push_back(per_example / known);
    } else {
      out.push_back(d);
    }
  }
  LOCKSTEP_CHECK(out.num_elements() == in.num_elements() || in[0] == 0, "Reshape '", name(),
                 "': input shape ", in.to_string(),
                 " does not have the target's element count (target ", out.to_string(), ").");
  return out;
}

Shape Reshape::compute_output_shape(const Shape& input_shape) const {
  return resolve(input_shape);
}

Tensor Reshape::call(const Tensor& inputs, bool) {
  return reshape(inputs, resolve(inputs.shape()));
}

nlohmann::json Reshape::get_config() const {
  auto c = Layer::get_config();
  c["target_shape"] = target_;
  return c;
}

}  // namespace lockstep::keras::layers
