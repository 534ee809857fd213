// A Dense layer's kernel gradient read from a dense transposed copy of its input
// (Tensor::transposed_copy, written beside the input by a Rescaling): the same bits as the product
// through a strided view of the input, and within the bound of its arithmetic of a float64 loop.
#include <gtest/gtest.h>

#include "testing/bf16_matmul_mode.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "lockstep/core/bfloat16.h"
#include "lockstep/ops/cpu_kernels.h"
#include "lockstep/ops/linear.h"
#include "lockstep/ops/matmul.h"

namespace lockstep {
namespace {

std::vector<bfloat16> random_bf16(int64_t n, unsigned seed, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<bfloat16> v(static_cast<size_t>(n));
  for (bfloat16& e : v) e = bfloat16(d(rng));
  return v;
}

Tensor bf16_tensor(const std::vector<bfloat16>& v, const Shape& shape) {
  Tensor t(shape, DType::bfloat16);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<bfloat16>()[i] = v[static_cast<size_t>(i)];
  return t;
}

struct Case {
  int64_t rows, inputs, units;
};

TEST(LinearTransposedInput, KernelGradientFromTheCopyHasTheBitsOfTheStridedProduct) {
  // Both forms of the bfloat16 product: oneDNN's bfloat16 kernels (where the copy is read) and
  // the float32 form (where it is not).
  for (ops::Bf16MatmulMode mode :
       {ops::Bf16MatmulMode::bfloat16_kernels, ops::Bf16MatmulMode::float32_compute}) {
    testing::Bf16MatmulModeGuard guard(mode);
    for (const Case& c : {Case{128, 784, 128}, Case{37, 50, 23}, Case{100, 33, 64}}) {
      const auto xv = random_bf16(c.rows * c.inputs, 1, 1.0f);
      const auto kv = random_bf16(c.inputs * c.units, 2, 0.1f);
      const auto dyv = random_bf16(c.rows * c.units, 3, 0.01f);
      Tensor plain = bf16_tensor(xv, {c.rows, c.inputs});
      Tensor with_copy = Tensor::with_room_for_transpose(c.rows, c.inputs, DType::bfloat16);
      Tensor room = with_copy.transpose_room();
      for (int64_t i = 0; i < c.rows; ++i) {
        for (int64_t k = 0; k < c.inputs; ++k) {
          with_copy.data<bfloat16>()[i * c.inputs + k] = xv[static_cast<size_t>(i * c.inputs + k)];
          room.data<bfloat16>()[k * c.rows + i] = xv[static_cast<size_t>(i * c.inputs + k)];
        }
      }
      with_copy.mark_transposed_copy();
      ASSERT_TRUE(with_copy.transposed_copy().defined());
      Tensor kernel = bf16_tensor(kv, {c.inputs, c.units});
      Tensor dy = bf16_tensor(dyv, {c.rows, c.units});
      Tensor y = ops::linear_forward(plain, kernel, Tensor(), ops::FusedActivation::none);
      ops::LinearGrads a = ops::linear_backward(dy, with_copy, kernel, y,
                                                ops::FusedActivation::none, true, true, false);
      ops::LinearGrads b =
          ops::linear_backward(dy, plain, kernel, y, ops::FusedActivation::none, true, true, false);
      ASSERT_EQ(a.dkernel.dtype(), DType::bfloat16);
      for (int64_t i = 0; i < a.dkernel.num_elements(); ++i) {
        ASSERT_EQ(a.dkernel.data<bfloat16>()[i].bits, b.dkernel.data<bfloat16>()[i].bits)
            << "dkernel element " << i << ", " << c.rows << "x" << c.inputs << "x" << c.units;
      }
      for (int64_t i = 0; i < a.dx.num_elements(); ++i) {
        ASSERT_EQ(a.dx.data<bfloat16>()[i].bits, b.dx.data<bfloat16>()[i].bits) << "dx " << i;
      }
      // Where oneDNN's bfloat16 kernels run, the product reads the copy: zeroed behind the
      // mark, it gives a zero gradient (a check that the path above is the one under test).
      if (mode == ops::Bf16MatmulMode::bfloat16_kernels && ops::has_native_bfloat16_math() &&
          !ops::bf16_matmul_computes_in_f32(c.rows, c.inputs, c.units)) {
        Tensor spoiled = Tensor::with_room_for_transpose(c.rows, c.inputs, DType::bfloat16);
        spoiled.copy_from(plain);
        std::memset(spoiled.transpose_room().raw_data(), 0, spoiled.transpose_room().nbytes());
        spoiled.mark_transposed_copy();
        ops::LinearGrads z = ops::linear_backward(dy, spoiled, kernel, y,
                                                  ops::FusedActivation::none, false, true, false);
        for (int64_t i = 0; i < z.dkernel.num_elements(); ++i) {
          ASSERT_EQ(z.dkernel.data<bfloat16>()[i].bits, 0) << "dkernel element " << i;
        }
      }
      // dkernel[k][j] = Σ_i x[i][k] dy[i][j]: each product of two bfloat16 values is exact in
      // float32, the sum of `rows` of them in float32 errs by at most (rows − 1) u Σ|terms| with
      // u = 2^-24, and the result's rounding to bfloat16 by at most its unit roundoff, 2^-8 of it
      // (8 significant bits).
      for (int64_t k = 0; k < c.inputs; ++k) {
        for (int64_t j = 0; j < c.units; ++j) {
          double ref = 0, abs_sum = 0;
          for (int64_t i = 0; i < c.rows; ++i) {
            const double t =
                static_cast<double>(static_cast<float>(xv[static_cast<size_t>(i * c.inputs + k)])) *
                static_cast<float>(dyv[static_cast<size_t>(i * c.units + j)]);
            ref += t;
            abs_sum += std::fabs(t);
          }
          const double sum_err = static_cast<double>(c.rows - 1) * std::ldexp(1.0, -24) * abs_sum;
          const double bound = std::ldexp(1.0, -8) * (std::fabs(ref) + sum_err) + sum_err;
          const double got = static_cast<float>(a.dkernel.data<bfloat16>()[k * c.units + j]);
          ASSERT_LE(std::fabs(got - ref), bound) << "dkernel[" << k << "][" << j << "]";
        }
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
