// How bfloat16 matmuls run (ops::Bf16MatmulMode): forced modes answer as forced; the automatic
// choice is made once per shape, and every thread that asks about a shape at once (replicas
// reaching their first step together) gets the same answer; both paths compute the product.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "lockstep/core/random.h"
#include "lockstep/ops/cpu_kernels.h"
#include "lockstep/ops/matmul.h"
#include "lockstep/ops/shape_ops.h"
#include "testing/bf16_matmul_mode.h"

namespace lockstep {
namespace {

using ops::Bf16MatmulMode;

TEST(Bf16MatmulMode, ForcedModesAnswerAsForced) {
  {
    testing::Bf16MatmulModeGuard g(Bf16MatmulMode::float32_compute);
    EXPECT_TRUE(ops::bf16_matmul_computes_in_f32(64, 32, 16));
  }
  {
    // Forced bfloat16 kernels where oneDNN has them; where it has none (below AVX512_CORE, or
    // under ONEDNN_MAX_CPU_ISA) the product computes in float32 whatever the mode.
    testing::Bf16MatmulModeGuard g(Bf16MatmulMode::bfloat16_kernels);
    EXPECT_EQ(ops::bf16_matmul_computes_in_f32(64, 32, 16), !ops::has_native_bfloat16_math());
  }
}

// Below AVX512_CORE (or under ONEDNN_MAX_CPU_ISA=AVX2: the isa-labelled runs) oneDNN has no
// bfloat16 matmul, and even the measured mode computes in float32 rather than try one.
TEST(Bf16MatmulMode, TheMeasuredModeComputesInFloat32WhereNoBfloat16KernelExists) {
  testing::Bf16MatmulModeGuard g(Bf16MatmulMode::measured);
  const bool in_f32 = ops::bf16_matmul_computes_in_f32(40, 24, 8);
  EXPECT_TRUE(in_f32 || ops::has_native_bfloat16_math());
}

// mixed_bfloat16's float32 form (keras::Layer::computes_bfloat16_in_float32): where oneDNN has
// no bfloat16 kernels, and in the measured mode where its bfloat16 kernel is not clearly faster
// than its float32 one (on an Intel core without AMX, or under ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16
// on one: float32; with AMX or on an AMD Zen 4 or 5: bfloat16). A forced mode keeps bfloat16
// activations wherever bfloat16 kernels exist, and the measured answer never changes within a
// process, whatever the mode asked in between.
TEST(Bf16MatmulMode, Mixed_bfloat16TakesItsFloat32FormWhereBfloat16KernelsAreNotFaster) {
  const bool native = ops::has_native_bfloat16_math();
  for (Bf16MatmulMode forced :
       {Bf16MatmulMode::float32_compute, Bf16MatmulMode::bfloat16_kernels}) {
    testing::Bf16MatmulModeGuard g(forced);
    EXPECT_EQ(ops::mixed_bfloat16_computes_in_f32(), !native);
  }
  bool form = false;
  {
    testing::Bf16MatmulModeGuard g(Bf16MatmulMode::measured);
    form = ops::mixed_bfloat16_computes_in_f32();
    EXPECT_TRUE(form || native);
  }
  for (int i = 0; i < 3; ++i) {
    testing::Bf16MatmulModeGuard g(i % 2 ? Bf16MatmulMode::measured
                                         : Bf16MatmulMode::float32_compute);
    EXPECT_EQ(ops::mixed_bfloat16_computes_in_f32(), i % 2 ? form : !native);
  }
}

TEST(Bf16MatmulMode, TheAutomaticChoiceIsOnePerShapeForAllThreads) {
  testing::Bf16MatmulModeGuard g(Bf16MatmulMode::measured);
  // Shapes no other test multiplies, asked by 4 threads at once, twice each.
  const std::vector<std::array<int64_t, 3>> shapes = {{96, 200, 48}, {17, 33, 65}, {256, 96, 96}};
  for (const auto& s : shapes) {
    std::vector<int> answers(8, -1);
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < 4) {
        }
        answers[static_cast<size_t>(2 * t)] = ops::bf16_matmul_computes_in_f32(s[0], s[1], s[2]);
        answers[static_cast<size_t>(2 * t + 1)] =
            ops::bf16_matmul_computes_in_f32(s[0], s[1], s[2]);
      });
    }
    for (auto& th : threads) th.join();
    for (int a : answers) EXPECT_EQ(a, answers[0]) << s[0] << "x" << s[1] << "x" << s[2];
    EXPECT_EQ(ops::bf16_matmul_computes_in_f32(s[0], s[1], s[2]), answers[0] == 1);
  }
}

// Whatever the mode, a bfloat16 product equals the float64 product of the same bfloat16 values
// to float32 accumulation and one final bfloat16 rounding.
TEST(Bf16MatmulMode, BothPathsComputeTheProduct) {
  Generator gen(4);
  const int64_t m = 48, k = 200, n = 40;
  Tensor a = ops::cast_forward(gen.uniform({m, k}, -1, 1), DType::bfloat16);
  Tensor b = ops::cast_forward(gen.uniform({k, n}, -1, 1), DType::bfloat16);
  Tensor a64 = ops::cast_forward(a, DType::float64), b64 = ops::cast_forward(b, DType::float64);
  for (Bf16MatmulMode mode : {Bf16MatmulMode::float32_compute, Bf16MatmulMode::bfloat16_kernels}) {
    testing::Bf16MatmulModeGuard g(mode);
    Tensor y = ops::cast_forward(ops::matmul_forward(a, b), DType::float64);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double ref = 0;
        for (int64_t p = 0; p < k; ++p)
          ref += a64.data<double>()[i * k + p] * b64.data<double>()[p * n + j];
        EXPECT_NEAR(y.data<double>()[i * n + j], ref, 1e-2 * std::abs(ref) + 1e-4)
            << "mode " << static_cast<int>(mode) << " at " << i << "," << j;
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
