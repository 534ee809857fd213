// mixed_precision::measure_step_memory: the bytes a training step's tape holds for the backward
// pass, measured from the storage pool, against the tensors each op is known to save, computed
// here from the shapes. Under mixed_bfloat16 the hidden activations take half the bytes, except
// in the policy's float32 form.
#include <gtest/gtest.h>

#include "testing/bf16_matmul_mode.h"

#include "lockstep/autodiff/functions.h"
#include "lockstep/core/cpu_isa.h"
#include "lockstep/keras.h"
#include "lockstep/ops/cpu_kernels.h"
#include "lockstep/ops/matmul.h"
#include "testing/policy_guard.h"

namespace lockstep::keras {
namespace {

using lockstep::testing::PolicyGuard;

constexpr int64_t kBatch = 32, kIn = 64, kHidden = 256, kClasses = 10;

mixed_precision::StepMemory measure(const std::string& policy, bool float32_output = false) {
  PolicyGuard guard(policy);
  set_random_seed(1);
  // The CLI's models in small: uint8 pixels, Rescaling, two relu layers, a softmax layer.
  Sequential model(
      {Input({kIn}, DType::uint8), layers::Rescaling(1.0 / 255, 0.0),
       layers::Dense({.units = kHidden, .activation = "relu"}),
       layers::Dense({.units = kHidden, .activation = "relu"}),
       float32_output
           ? layers::Dense({.units = kClasses, .activation = "softmax", .dtype = "float32"})
           : layers::Dense({.units = kClasses, .activation = "softmax"})});
  Tensor x({kBatch, kIn}, DType::uint8);
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(i);
  std::vector<int64_t> labels(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) labels[static_cast<size_t>(i)] = i % kClasses;
  Tensor y = one_hot(Tensor::from_vector<int64_t>(labels, {kBatch}), kClasses);
  return mixed_precision::measure_step_memory(model, x, y, losses::CategoricalCrossentropy());
}

// What the recorded ops keep, in bytes of `act` per element for the activations: the rescaled
// input and both hidden outputs (saved by the linear ops as their x and relu's y), and the float32
// probabilities (softmax's output, which the cross-entropy also keeps: one tensor). The logits
// are not kept: neither the last linear op (no activation) nor softmax reads them backwards. The
// kernels are the variables themselves (or their persistent rounded copies), so they add nothing.
size_t expected_saved(size_t act) {
  const size_t input = kBatch * kIn * act, hidden = 2 * kBatch * kHidden * act;
  const size_t probabilities = kBatch * kClasses * 4;
  return input + hidden + probabilities;
}

TEST(StepMemory, Float32TapeHoldsTheFloat32Activations) {
  mixed_precision::StepMemory m = measure("float32");
  EXPECT_EQ(m.saved_for_backward, expected_saved(4));
  EXPECT_EQ(m.rounded_weight_copies, 0u);
  EXPECT_GE(m.step_peak, m.saved_for_backward);
}

constexpr size_t kParams =
    (kIn * kHidden + kHidden) + (kHidden * kHidden + kHidden) + (kHidden * kClasses + kClasses);

// "Store bfloat16, compute float32": the weights' rounded copies are persistent (kept by the
// optimizer), so the tape holds the bfloat16 activations only.
// Where oneDNN has no bfloat16 math (below AVX512_CORE, or under LOCKSTEP_MAX_CPU_ISA=AVX2) the
// policy takes its float32 form (Layer::computes_bfloat16_in_float32): float32 tensors of
// bfloat16 values, so the tape holds what float32's holds: each relu output, rounded as it is
// stored, is the one tensor both its own backward and the next layer keep.
size_t mixed_activation_bytes() {
  return ops::has_native_bfloat16_math() ? 2 : 4;
}

TEST(StepMemory, MixedBfloat16HalvesTheActivations) {
  lockstep::testing::Bf16MatmulModeGuard mode(ops::Bf16MatmulMode::float32_compute);
  const mixed_precision::StepMemory fp = measure("float32");
  const mixed_precision::StepMemory mp = measure("mixed_bfloat16");
  EXPECT_EQ(mp.saved_for_backward, expected_saved(mixed_activation_bytes()));
  EXPECT_EQ(mp.rounded_weight_copies, kParams * 4);
  const size_t probabilities = kBatch * kClasses * 4;
  if (ops::has_native_bfloat16_math()) {
    // Everything but the float32 probabilities is halved.
    EXPECT_EQ(2 * (mp.saved_for_backward - probabilities), fp.saved_for_backward - probabilities);
  } else {
    EXPECT_EQ(mp.saved_for_backward, fp.saved_for_backward);
  }
}

// With oneDNN's bfloat16 kernels the Rescaling also writes its output's transpose beside it, in
// the same block, for the first Dense layer's kernel gradient (Tensor::transposed_copy), where
// the AVX512_BF16 conversion runs: the tape keeps it with the input.
size_t transposed_input_bytes() {
  const bool written = ops::has_native_bfloat16_math() &&
                       effective_cpu_isa() >= CpuIsa::avx512_core_bf16 &&
                       mixed_precision::transposed_input_copies();
  return written ? kBatch * kIn * 2 : 0;  // a multiple of the blocks' 64-byte alignment
}

// oneDNN's bfloat16 kernels: each layer multiplies by the persistent bfloat16 copies of its
// weights (kept by the optimizer, two bytes a parameter), not by casts made in the step, so the
// tape holds the bfloat16 activations only. Where oneDNN has no bfloat16 kernels (below
// AVX512_CORE, or under ONEDNN_MAX_CPU_ISA=AVX2) the forced mode computes in float32 and the step
// holds what the "store bfloat16, compute float32" step holds.
TEST(StepMemory, MixedBfloat16WithBfloat16KernelsHalvesTheActivations) {
  lockstep::testing::Bf16MatmulModeGuard mode(ops::Bf16MatmulMode::bfloat16_kernels);
  const mixed_precision::StepMemory mp = measure("mixed_bfloat16");
  const bool native = ops::has_native_bfloat16_math();
  EXPECT_EQ(mp.saved_for_backward,
            native ? expected_saved(2) + transposed_input_bytes() : expected_saved(4));
  EXPECT_EQ(mp.rounded_weight_copies, native ? kParams * 2 : kParams * 4);
}

// The CLI's models keep the output layer float32 (Keras' idiom for softmax): it takes the last
// hidden activations in bfloat16 as they are, so the tape holds no float32 copy of them.
TEST(StepMemory, Float32OutputLayerKeepsNoFloat32CopyOfTheHiddenActivations) {
  {
    lockstep::testing::Bf16MatmulModeGuard mode(ops::Bf16MatmulMode::float32_compute);
    const mixed_precision::StepMemory fp = measure("float32", true);
    const mixed_precision::StepMemory mp = measure("mixed_bfloat16", true);
    EXPECT_EQ(fp.saved_for_backward, expected_saved(4));
    EXPECT_EQ(mp.saved_for_backward,
              ops::has_native_bfloat16_math() ? expected_saved(2) : expected_saved(4));
  }
  {
    // The two bfloat16 layers multiply by their persistent bfloat16 copies; the float32 output
    // layer uses its own weights.
    lockstep::testing::Bf16MatmulModeGuard mode(ops::Bf16MatmulMode::bfloat16_kernels);
    const mixed_precision::StepMemory mp = measure("mixed_bfloat16", true);
    const bool native = ops::has_native_bfloat16_math();
    const size_t hidden_params = kIn * kHidden + kHidden + kHidden * kHidden + kHidden;
    EXPECT_EQ(mp.saved_for_backward,
              native ? expected_saved(2) + transposed_input_bytes() : expected_saved(4));
    EXPECT_EQ(mp.rounded_weight_copies, native ? hidden_params * 2 : hidden_params * 4);
  }
}

}  // namespace
}  // namespace lockstep::keras
