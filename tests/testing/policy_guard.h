#pragma once
// Sets the global mixed-precision policy for one test and puts float32 back afterwards.
#include <string>

#include "lockstep/keras/mixed_precision.h"

namespace lockstep::testing {

class PolicyGuard {
 public:
  explicit PolicyGuard(const std::string& name) { keras::mixed_precision::set_global_policy(name); }
  ~PolicyGuard() { keras::mixed_precision::set_global_policy("float32"); }
  PolicyGuard(const PolicyGuard&) = delete;
  PolicyGuard& operator=(const PolicyGuard&) = delete;
};

}  // namespace lockstep::testing
