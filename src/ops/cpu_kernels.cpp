#include "lockstep/ops/cpu_kernels.h"

#include "lockstep/ops/matmul.h"
#include "onednn.h"

namespace lockstep::ops {

std::string_view onednn_cpu_isa() {
  return onednn::effective_isa_name();
}

std::string onednn_matmul_kernel() {
  return onednn::matmul_implementation();
}

bool has_native_bfloat16_math() {
  return onednn::has_bf16();
}

std::string bfloat16_math_summary() {
  const std::string isa(onednn_cpu_isa());
  if (has_native_bfloat16_math() && mixed_bfloat16_computes_in_f32()) {
    return "bfloat16 math: native (" + isa +
           ") but no faster than float32 here: mixed_bfloat16 computes in float32 kernels on "
           "bfloat16 values (same numerics, float32's memory)";
  }
  if (has_native_bfloat16_math()) return "bfloat16 math: native (" + isa + ")";
  return "bfloat16 emulated in float32 kernels on this CPU (" + isa +
         "): same numerics, no speed-up, float32's memory";
}

}  // namespace lockstep::ops
