#include "lockstep/keras/mixed_precision.h"

#include <mutex>

#include "lockstep/core/error.h"

namespace lockstep::keras::mixed_precision {

Policy::Policy(std::string name) : name_(std::move(name)) {
  if (name_ == "float32") {
    compute_ = variable_ = DType::float32;
  } else if (name_ == "mixed_bfloat16") {
    compute_ = DType::bfloat16;
    variable_ = DType::float32;
  } else if (name_ == "bfloat16") {
    compute_ = variable_ = DType::bfloat16;
  } else if (name_ == "float64") {
    compute_ = variable_ = DType::float64;
  } else {
    throw InvalidArgument(
        "mixed_precision::Policy: expected one of \"float32\", "
        "\"mixed_bfloat16\", \"bfloat16\", \"float64\". Received: \"" +
        name_ + "\".");
  }
}

namespace {
std::mutex policy_mu;
Policy& global() {
  static Policy p("float32");
  return p;
}
}  // namespace

void set_global_policy(const Policy& policy) {
  std::lock_guard lock(policy_mu);
  global() = policy;
}

void set_global_policy(const std::string& name) {
  set_global_policy(Policy(name));
}

Policy global_policy() {
  std::lock_guard lock(policy_mu);
  return global();
}

}  // namespace lockstep::keras::mixed_precision
