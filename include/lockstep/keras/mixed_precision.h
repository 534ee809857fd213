#pragma once
// Keras' mixed precision policies (keras.mixed_precision):
//   "float32"         compute and variables in float32 (the default);
//   "mixed_bfloat16"  variables in float32, layers compute in bfloat16 (inputs and weights are cast
//                     at each call; gradients reach the float32 variables as float32). On
//                     machines whose bfloat16 matmuls compute in float32 (no AMX), Dense
//                     multiplies by its weights' bfloat16 values kept in float32 instead (a copy
//                     cached per variable and rewritten by the optimizer as it updates the
//                     weights, Variable::bfloat16_rounded; same values, identity gradient; see
//                     docs/performance.md "Step time"). A float32 layer (e.g. the output layer)
//                     fed bfloat16 activations multiplies them as they are, in float32;
//   "bfloat16"        compute and variables in bfloat16;
//   "float64"         compute and variables in float64 (Keras accepts any dtype name as a policy;
//                     this one exists so every layer can be gradient-checked in float64).
// A layer reads the global policy when it is constructed (Keras semantics): changing the global
// policy later does not affect layers that already exist. A layer's own `dtype` option (for
// example an output layer forced to "float32") overrides the global policy.
// No loss scaling: bfloat16 has float32's exponent range, so gradients do not underflow.
#include <string>

#include "lockstep/core/dtype.h"
#include "lockstep/core/tensor.h"

namespace lockstep::keras {
class Model;
namespace losses {
class Loss;
}
}  // namespace lockstep::keras

namespace lockstep::keras::mixed_precision {

class Policy {
 public:
  // Throws InvalidArgument for a name other than the four above.
  explicit Policy(std::string name);
  const std::string& name() const { return name_; }
  DType compute_dtype() const { return compute_; }
  DType variable_dtype() const { return variable_; }
  bool operator==(const Policy& other) const { return name_ == other.name_; }

 private:
  std::string name_;
  DType compute_, variable_;
};

// Process-wide; read by layers at construction.
void set_global_policy(const Policy& policy);
void set_global_policy(const std::string& name);
Policy global_policy();

// The memory of one training step of `model` on (x, y), measured from the storage pool's live
// bytes (StoragePoolStats::live_bytes), not computed from shapes: after a warm-up step (layers
// built, per-variable caches created), the forward pass runs under a gradient tape and everything
// it allocated that is still alive once the caller-visible results are dropped is what the tape
// keeps for the backward pass — the activations and anything else the recorded ops saved.
// Single-threaded measurement of a process-wide counter: other threads allocating or freeing
// tensors at the same time (a fit running elsewhere) distort it.
struct StepMemory {
  size_t saved_for_backward = 0;  // bytes the tape holds at the end of the forward pass
  size_t step_peak = 0;           // the most allocated above the starting point, forward + backward
  // Persistent bfloat16-rounded copies of the weights (Variable::bfloat16_rounded; mixed_bfloat16
  // without AMX), not part of the above: allocated once, not per step.
  size_t rounded_weight_copies = 0;
};
StepMemory measure_step_memory(Model& model, const Tensor& x, const Tensor& y,
                               const losses::Loss& loss);

}  // namespace lockstep::keras::mixed_precision
