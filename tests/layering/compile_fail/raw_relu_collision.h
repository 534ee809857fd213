#pragma once
// Force-included by layering.compile_fail_catches_a_shared_name: a raw kernel that shares the
// differentiable relu's name, the mistake check_compile_fail.cmake must report.
#include "lockstep/core/tensor.h"

namespace lockstep::ops {
Tensor relu(const Tensor& x);
}  // namespace lockstep::ops
