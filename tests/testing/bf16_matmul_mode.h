#pragma once
// Forces how bfloat16 matmuls run (ops::set_bf16_matmul_mode) for one test and restores the
// previous mode, so a test of one path runs on every machine instead of skipping where the
// automatic choice picks the other.
#include "lockstep/ops/matmul.h"

namespace lockstep::testing {

class Bf16MatmulModeGuard {
 public:
  explicit Bf16MatmulModeGuard(ops::Bf16MatmulMode mode) : previous_(ops::bf16_matmul_mode()) {
    ops::set_bf16_matmul_mode(mode);
  }
  ~Bf16MatmulModeGuard() { ops::set_bf16_matmul_mode(previous_); }
  Bf16MatmulModeGuard(const Bf16MatmulModeGuard&) = delete;
  Bf16MatmulModeGuard& operator=(const Bf16MatmulModeGuard&) = delete;

 private:
  ops::Bf16MatmulMode previous_;
};

}  // namespace lockstep::testing
