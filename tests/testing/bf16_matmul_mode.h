#pragma once
// Forces how bfloat16 matmuls run (ops::set_bf16_matmul_mode) for one test and restores the
// previous mode, so a test of one path runs on every machine instead of skipping where the
// automatic choice picks the other.
#include "lockstep/ops/matmul.h"
#include "testing/setting_guard.h"

namespace lockstep::testing {

class Bf16MatmulModeGuard : public SettingGuard<ops::Bf16MatmulMode> {
 public:
  explicit Bf16MatmulModeGuard(ops::Bf16MatmulMode mode)
      : SettingGuard(ops::bf16_matmul_mode, ops::set_bf16_matmul_mode, mode) {}
};

}  // namespace lockstep::testing
