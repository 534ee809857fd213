#pragma once
// Keras' mixed precision policies (keras.mixed_precision):
//   "float32"         compute and variables in float32 (the default);
//   "mixed_bfloat16"  variables in float32, layers compute in bfloat16 (inputs and weights are cast
//                     at each call; gradients reach the float32 variables as float32). Dense
//                     multiplies by a bfloat16 copy of its weights kept by this policy beside each
//                     variable and rewritten by the optimizer as it updates the weights
//                     (bfloat16_weights() below), or, where bfloat16 matmuls compute in float32
//                     (no AMX), by their bfloat16 values kept in float32 (rounded_weights(); same
//                     values, identity gradient; see docs/performance.md "Mixed precision"). A
//                     float32 layer (e.g. the output layer) fed bfloat16 activations multiplies
//                     them as they are, in float32. Where oneDNN has no bfloat16 math at all the
//                     policy takes its float32 form (Layer::computes_bfloat16_in_float32): float32
//                     tensors of bfloat16 values;
//   "bfloat16"        compute and variables in bfloat16;
//   "float64"         compute and variables in float64 (Keras accepts any dtype name as a policy;
//                     this one exists so every layer can be gradient-checked in float64).
// A layer reads the global policy when it is constructed (Keras semantics): changing the global
// policy later does not affect layers that already exist. A layer's own `dtype` option (for
// example an output layer forced to "float32") overrides the global policy.
// No loss scaling: bfloat16 has float32's exponent range, so gradients do not underflow.
#include <string>

#include "lockstep/autodiff/variable.h"
#include "lockstep/core/dtype.h"
#include "lockstep/core/tensor.h"
#include "lockstep/distribute/elementwise_update.h"

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

// The policy's copy of a float32 variable rounded to bfloat16 values, kept in float32
// (round_to_bfloat16_values): what a mixed_bfloat16 layer multiplies by where bfloat16 matmuls
// compute in float32. Kept beside the variable (Variable::attach_companion), one per buffer of a
// double-buffered variable, computed on first use and after any write through assign*; the
// optimizers keep it current as they update the weights (rounded_weights_data), which saves a
// full pass over every kernel per step. Safe to call from several threads at once (the replicas
// of a step). The handle shares the copy's storage: it changes when the variable does. Throws
// InvalidArgument for a variable that is not float32.
Tensor rounded_weights(const Variable& variable);
// The same copy as bfloat16 (what oneDNN's bfloat16 kernels read): bfloat16(value) element by
// element, bit for bit the cast to bfloat16, kept and invalidated as rounded_weights() is.
Tensor bfloat16_weights(const Variable& variable);
// The same bfloat16 values laid out for a matmul's kernel (`layout`, from
// ops::bf16_kernel_layout, which must outlive the variable: that function's layouts live as long
// as the process): a 1-D tensor of layout.size elements, zero where the layout pads. A variable
// keeps one such layout, the first asked for; another gives an undefined tensor (multiply by
// bfloat16_weights() then). Kept and invalidated as the others are.
Tensor paired_bfloat16_weights(const Variable& variable, const PairedRowsLayout& layout);
// Whether layers may multiply by paired_bfloat16_weights() (process-wide; on unless the
// environment sets LOCKSTEP_PAIRED_KERNELS=0): off, they take bfloat16_weights() — the same
// products, each with a copy of the kernel into oneDNN's layout.
void set_paired_kernels(bool enabled);
bool paired_kernels();
// Whether a training step's Rescaling of uint8 rows under a bfloat16 compute dtype also writes
// its output's transpose beside it (Tensor::transposed_copy), from which the next Dense layer's
// kernel gradient reads a dense xᵀ (process-wide; by default on where oneDNN's bfloat16 kernels
// are AMX ones, whose gradient it speeds up, else off; LOCKSTEP_TRANSPOSED_INPUTS=0 or 1 decides
// instead; only where the AVX512_BF16 conversion runs). The same bits either way.
void set_transposed_input_copies(bool enabled);
bool transposed_input_copies();
// For code that updates the value in place through raw_value()'s data (optimizers): the copy in
// use when it is current, else nothing. Whoever writes element i of the value must then write its
// rounding to element i of that copy before the next read; with nothing there is nothing to do
// (the next rounded_weights() or bfloat16_weights() recomputes it). With several kinds in use, the
// first of the float32, the bfloat16 and the paired one is handed out and the others go stale.
distribute::RoundedOut rounded_weights_out(const Variable& variable);
// For an update written out of place into the variable's next buffer (the replicated step): where
// the rounding of the next values goes when a copy of the current ones is in use (the bfloat16 one
// when both are), else nothing. Whoever gets a destination must write it in full before
// Variable::flip_buffers(), which then makes it the current copy (and leaves the other kind stale).
distribute::RoundedOut next_rounded_weights_out(const Variable& variable);
// Makes `spare` the copy next_rounded_weights_out() handed out (it must have the copy's dtype and
// the variable's shape) and hands the old one back in `spare`, before Variable::flip_buffers():
// for an update that wrote part of the copy elsewhere while another writer may still be writing
// the old one. FailedPrecondition when no copy was handed out since the last flip.
void swap_next_rounded_weights(const Variable& variable, Tensor& spare);

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
  // Persistent bfloat16-rounded copies of the weights (bfloat16_weights() or rounded_weights()),
  // not part of the above: allocated once, not per step.
  size_t rounded_weight_copies = 0;
};
StepMemory measure_step_memory(Model& model, const Tensor& x, const Tensor& y,
                               const losses::Loss& loss);

}  // namespace lockstep::keras::mixed_precision
