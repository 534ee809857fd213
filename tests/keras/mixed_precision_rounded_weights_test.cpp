// mixed_bfloat16 Dense on machines whose bfloat16 matmuls compute in float32 multiplies by the
// kernel's cached bfloat16-rounded copy (mixed_precision::rounded_weights), which the optimizer
// keeps current. These tests check the layer never multiplies by a stale copy and that gradients
// still reach the variable, against float64 loops on the rounded operands.
#include <gtest/gtest.h>

#include "lockstep/keras/mixed_precision.h"

#include "testing/bf16_matmul_mode.h"

#include <cmath>
#include <cstring>
#include <random>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/keras.h"
#include "lockstep/ops/matmul.h"
#include "testing/policy_guard.h"

namespace lockstep::keras {
namespace {

using lockstep::testing::PolicyGuard;

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  Tensor t(shape, DType::float32);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

double as_bf16(float f) {
  return static_cast<double>(static_cast<float>(bfloat16(f)));
}

// x·kernel + bias in float64 on the bfloat16 roundings of the operands.
std::vector<double> reference_linear(const Tensor& x, const Tensor& kernel, const Tensor& bias) {
  const int64_t m = x.dim(0), k = x.dim(1), n = kernel.dim(1);
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = as_bf16(bias.data<float>()[j]);
      for (int64_t p = 0; p < k; ++p) {
        s += as_bf16(x.data<float>()[i * k + p]) * as_bf16(kernel.data<float>()[p * n + j]);
      }
      y[static_cast<size_t>(i * n + j)] = s;
    }
  }
  return y;
}

void expect_close_to(const Tensor& y, const std::vector<double>& ref) {
  ASSERT_EQ(static_cast<size_t>(y.num_elements()), ref.size());
  Tensor y64 = y.to(DType::float64);
  for (size_t i = 0; i < ref.size(); ++i) {
    // The output is rounded to bfloat16: relative 2^-8, plus float32 accumulation.
    EXPECT_NEAR(y64.data<double>()[i], ref[i], 1e-2 * std::abs(ref[i]) + 1e-3) << "element " << i;
  }
}

class MixedDenseBothKernels : public ::testing::TestWithParam<ops::Bf16MatmulMode> {};

// Under either way of multiplying bfloat16 operands (widened float32 products, or oneDNN's
// bfloat16 kernels): the kernel's gradient is that of its bfloat16 values (rounded to bfloat16,
// widened), the bias's float32.
TEST_P(MixedDenseBothKernels, AssignedWeightsAreUsedByTheNextCall) {
  lockstep::testing::Bf16MatmulModeGuard mode(GetParam());
  PolicyGuard guard("mixed_bfloat16");
  layers::Dense dense({.units = 6});
  Tensor x = random_tensor({5, 9}, 1);
  Tensor y = dense(x);  // builds the layer
  expect_close_to(y, reference_linear(x, dense.kernel().raw_value(), dense.bias().raw_value()));
  Tensor k2 = random_tensor({9, 6}, 2), b2 = random_tensor({6}, 3);
  dense.kernel().assign(k2);
  dense.bias().assign(b2);
  expect_close_to(dense(x), reference_linear(x, k2, b2));
  dense.kernel().assign_sub(k2);  // zero kernel: y = bias
  Tensor zero = Tensor::zeros({9, 6}, DType::float32);
  expect_close_to(dense(x), reference_linear(x, zero, b2));
}

TEST_P(MixedDenseBothKernels, ALayerUsedTwiceGetsTheSumOfBothGradients) {
  lockstep::testing::Bf16MatmulModeGuard mode(GetParam());
  PolicyGuard guard("mixed_bfloat16");
  layers::Dense dense({.units = 3});
  Tensor x1 = random_tensor({4, 7}, 4), x2 = random_tensor({6, 7}, 5);
  dense(x1);  // build
  GradientTape tape;
  Tensor loss =
      add(reduce_sum(cast(dense(x1), DType::float32)), reduce_sum(cast(dense(x2), DType::float32)));
  std::vector<Tensor> g = tape.gradient(loss, {dense.kernel(), dense.bias()});
  ASSERT_TRUE(g[0].defined());
  ASSERT_TRUE(g[1].defined());
  ASSERT_EQ(g[0].dtype(), DType::float32);
  // d/dkernel[p][j] = s_1 + s_2, s_k the sum over use k's rows of bf16(x[., p]); d/dbias[j] =
  // rows. Each use's gradient is a float32 sum of n_k terms (within gamma_{n_k} of their
  // magnitudes, e_k) rounded to bfloat16 (u = 2^-8 of it); the two are added in float32
  // (2^-24 of the result).
  const double u = std::ldexp(1.0, -8), u32 = std::ldexp(1.0, -24);
  auto gamma32 = [u32](int n) { return n * u32 / (1 - n * u32); };
  for (int64_t p = 0; p < 7; ++p) {
    double s[2] = {0, 0}, mag[2] = {0, 0};
    for (int64_t i = 0; i < 4; ++i) s[0] += as_bf16(x1.data<float>()[i * 7 + p]);
    for (int64_t i = 0; i < 4; ++i) mag[0] += std::abs(as_bf16(x1.data<float>()[i * 7 + p]));
    for (int64_t i = 0; i < 6; ++i) s[1] += as_bf16(x2.data<float>()[i * 7 + p]);
    for (int64_t i = 0; i < 6; ++i) mag[1] += std::abs(as_bf16(x2.data<float>()[i * 7 + p]));
    double bound = 0;
    for (int k = 0; k < 2; ++k) {
      const double e = gamma32(k == 0 ? 4 : 6) * mag[k];
      bound += e + u * (std::abs(s[k]) + e);
    }
    bound += u32 * (std::abs(s[0]) + std::abs(s[1]) + bound);
    for (int64_t j = 0; j < 3; ++j)
      EXPECT_LE(std::abs(g[0].data<float>()[p * 3 + j] - (s[0] + s[1])), bound)
          << "kernel[" << p << "][" << j << "]";
  }
  for (int64_t j = 0; j < 3; ++j) EXPECT_NEAR(g[1].data<float>()[j], 10.0, 1e-5);
}

// The kernel's gradient into a bfloat16 destination (a training step's replica buffer): written
// there as bfloat16 when the layer is used once — the values the float32 result holds — and,
// used twice, the float32 sum of both uses returned instead (never narrowed into it).
TEST_P(MixedDenseBothKernels, AKernelsBfloat16DestinationTakesOneUseAndNotASum) {
  lockstep::testing::Bf16MatmulModeGuard mode(GetParam());
  PolicyGuard guard("mixed_bfloat16");
  layers::Dense dense({.units = 3});
  Tensor x1 = random_tensor({4, 7}, 4), x2 = random_tensor({6, 7}, 5);
  dense(x1);  // build
  EXPECT_EQ(dense.kernel().gradient_dtype(), DType::bfloat16);
  for (int uses : {1, 2}) {
    SCOPED_TRACE(std::to_string(uses) + " use(s)");
    auto loss_of = [&] {
      Tensor loss = reduce_sum(cast(dense(x1), DType::float32));
      return uses == 1 ? loss : add(loss, reduce_sum(cast(dense(x2), DType::float32)));
    };
    GradientTape plain;
    const std::vector<Tensor> want = plain.gradient(loss_of(), {dense.kernel(), dense.bias()});
    ASSERT_EQ(want[0].dtype(), DType::float32);
    Tensor dest({7, 3}, DType::bfloat16);
    GradientTape tape;
    const Tensor loss = loss_of();
    const std::vector<Tensor> got = tape.gradient(loss, {dense.kernel(), dense.bias()}, {dest, {}});
    ASSERT_EQ(got[0].dtype(), uses == 1 ? DType::bfloat16 : DType::float32);
    EXPECT_EQ(got[0].shares_storage_with(dest), uses == 1);
    const Tensor got32 = got[0].to(DType::float32);
    EXPECT_EQ(std::memcmp(got32.raw_data(), want[0].raw_data(), want[0].nbytes()), 0);
  }
}

// Under mixed_bfloat16 with policy `mode`: a Dense kernel's gradient into a float32 destination
// is written there, each element the bfloat16 destination's gradient widened, bit for bit.
void expect_float32_destination_holds_the_bfloat16_gradient_widened(ops::Bf16MatmulMode mode) {
  lockstep::testing::Bf16MatmulModeGuard guard_mode(mode);
  PolicyGuard guard("mixed_bfloat16");
  layers::Dense dense({.units = 5, .activation = "relu"});
  Tensor x = random_tensor({12, 33}, 7);
  dense(x);  // build
  auto gradient_into = [&](const Tensor& dest) {
    GradientTape tape;
    const Tensor loss = reduce_sum(cast(dense(x), DType::float32));
    return tape.gradient(loss, {dense.kernel(), dense.bias()}, {dest, {}})[0];
  };
  Tensor bf16_dest({33, 5}, DType::bfloat16), f32_dest({33, 5}, DType::float32);
  const Tensor via_bf16 = gradient_into(bf16_dest);
  ASSERT_TRUE(via_bf16.shares_storage_with(bf16_dest));
  const Tensor got = gradient_into(f32_dest);
  ASSERT_EQ(got.dtype(), DType::float32);
  EXPECT_TRUE(got.shares_storage_with(f32_dest));
  const Tensor want = via_bf16.to(DType::float32);
  EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()), 0);
  // Not all zero: a relu that let nothing through would make the comparison vacuous.
  size_t nonzero = 0;
  for (int64_t i = 0; i < got.num_elements(); ++i) nonzero += got.data<float>()[i] != 0.0f;
  EXPECT_GT(nonzero, 0u);
}

// One replica's step hands the tape a float32 destination. The measured mode takes the float32
// form where bfloat16 kernels are not faster (an Intel core without AMX) or absent, and that form
// rounds the float32 product where it lies instead of narrowing it to bfloat16 and widening it.
TEST(MixedPrecisionRoundedWeights, AKernelsFloat32DestinationHoldsTheBfloat16GradientWidened) {
  for (const auto mode : {ops::Bf16MatmulMode::measured, ops::Bf16MatmulMode::float32_compute,
                          ops::Bf16MatmulMode::bfloat16_kernels}) {
    SCOPED_TRACE("Bf16MatmulMode " + std::to_string(static_cast<int>(mode)));
    expect_float32_destination_holds_the_bfloat16_gradient_widened(mode);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, MixedDenseBothKernels,
                         ::testing::Values(ops::Bf16MatmulMode::bfloat16_kernels,
                                           ops::Bf16MatmulMode::float32_compute),
                         [](const auto& info) {
                           return info.param == ops::Bf16MatmulMode::bfloat16_kernels
                                      ? std::string("Bfloat16Kernels")
                                      : std::string("Float32Compute");
                         });

TEST(MixedPrecisionRoundedWeights, AfterFitTheCachedCopyIsTheRoundedKernel) {
  lockstep::testing::Bf16MatmulModeGuard mode(ops::Bf16MatmulMode::float32_compute);
  PolicyGuard guard("mixed_bfloat16");
  set_random_seed(3);
  Tensor x = random_tensor({64, 8}, 6);
  Tensor y = one_hot(Tensor::from_vector<int64_t>(std::vector<int64_t>(64, 1), {64}), 3);
  Sequential model({Input({8}), layers::Dense({.units = 16, .activation = "relu"}),
                    layers::Dense({.units = 3, .activation = "softmax"})});
  model.compile({.optimizer = optimizers::Adam({.learning_rate = 1e-2}),
                 .loss = losses::CategoricalCrossentropy()});
  model.fit(x, y, {.epochs = 2, .verbose = 0, .batch_size = 16});
  for (const Variable& v : model.trainable_weights()) {
    const float* r = mixed_precision::rounded_weights_out(v).values;
    ASSERT_NE(r, nullptr) << v.name() << ": the optimizer let the copy go stale";
    const float* w = v.raw_value().data<float>();
    for (int64_t i = 0; i < v.num_elements(); ++i) {
      ASSERT_EQ(static_cast<double>(r[i]), as_bf16(w[i])) << v.name() << "[" << i << "]";
    }
  }
}

// Conv2D, Embedding and MultiHeadAttention take their weights through Layer::autocast, which
// under mixed_bfloat16 reads the policy's persistent copies (bfloat16, or bfloat16 values in
// float32 in the policy's float32 form) instead of converting the weights at every call. After
// training, a model gives the bits of a fresh model given the same weights (whose copies are made
// from them), so no copy was stale; and the weights moved.
TEST(MixedPrecisionRoundedWeights,
     AfterFitLayersReadingTheirWeightsThroughAutocastSeeTheNewWeights) {
  PolicyGuard guard("mixed_bfloat16");
  auto make = [] {
    set_random_seed(4);
    const KerasTensor ids = Input({6}, DType::int64);
    const KerasTensor e = layers::Embedding({.input_dim = 11, .output_dim = 8})(ids);
    auto mha = std::make_shared<layers::MultiHeadAttention>(
        layers::MultiHeadAttentionOptions{.num_heads = 2, .key_dim = 4});
    const KerasTensor a = (*mha)({e, e});
    const KerasTensor c = layers::Conv2D(
        {.filters = 3, .kernel_size = {3, 3}, .activation = "relu"})(layers::Reshape({6, 8, 1})(a));
    const KerasTensor out = layers::Dense(
        {.units = 3, .activation = "softmax", .dtype = "float32"})(layers::Flatten()(c));
    auto m = std::make_unique<Model>(ids, out);
    m->compile({.optimizer = optimizers::Adam({.learning_rate = 1e-2}),
                .loss = losses::CategoricalCrossentropy()});
    return m;
  };
  std::vector<int64_t> id_values, label_values;
  for (int64_t i = 0; i < 32 * 6; ++i) id_values.push_back((i * 7) % 11);
  for (int64_t i = 0; i < 32; ++i) label_values.push_back(i % 3);
  const Tensor x = Tensor::from_vector<int64_t>(id_values, {32, 6});
  const Tensor y = one_hot(Tensor::from_vector<int64_t>(label_values, {32}), 3);
  std::unique_ptr<Model> trained = make();
  const std::vector<Tensor> before = trained->get_weights();
  trained->fit(x, y, {.epochs = 2, .verbose = 0, .batch_size = 8});
  std::unique_ptr<Model> fresh = make();
  fresh->set_weights(trained->get_weights());
  const std::vector<Tensor> after = trained->get_weights();
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_NE(before[i].to_vector<double>(), after[i].to_vector<double>()) << "weight " << i;
  }
  EXPECT_EQ(trained->predict(x).to_vector<float>(), fresh->predict(x).to_vector<float>());
}

// A float32 layer fed bfloat16 activations (the CLI's float32 output layer under mixed_bfloat16)
// multiplies them as they are, in float32, by its unrounded float32 weights: float32 output, a
// bfloat16 input gradient, float32 weight gradients, against float64 loops.
TEST(MixedPrecisionRoundedWeights, Float32LayerTakesBfloat16InputsWithoutACopy) {
  PolicyGuard guard("mixed_bfloat16");
  layers::Dense hidden({.units = 12, .activation = "relu"});
  layers::Dense out({.units = 5, .dtype = "float32"});
  Tensor x = random_tensor({6, 9}, 7);
  hidden(x);
  Tensor h = hidden(x);
  ASSERT_EQ(h.dtype(), DType::bfloat16);
  out(h);  // build
  const Tensor& k = out.kernel().raw_value();
  const Tensor& b = out.bias().raw_value();
  Tensor h32 = h.to(DType::float32);  // exact
  GradientTape tape;
  tape.watch(h);
  Tensor y = out(h, true);
  ASSERT_EQ(y.dtype(), DType::float32);
  // Forward: float32 products of bfloat16 inputs and float32 weights, no rounding of the output.
  for (int64_t i = 0; i < 6; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      double s = b.data<float>()[j];
      for (int64_t p = 0; p < 12; ++p) {
        s += static_cast<double>(h32.data<float>()[i * 12 + p]) * k.data<float>()[p * 5 + j];
      }
      EXPECT_NEAR(y.data<float>()[i * 5 + j], s, 1e-5 * (1.0 + std::abs(s))) << i << "," << j;
    }
  }
  // Backward of sum(y * w) for fixed weights w: dkernel = h^T w, dbias = column sums of w,
  // dh = w kernel^T (rounded to bfloat16, h's dtype).
  Tensor w = random_tensor({6, 5}, 8);
  Tensor loss = reduce_sum(mul(y, w));
  std::vector<Tensor> g =
      tape.gradient(loss, {h, out.kernel().raw_value(), out.bias().raw_value()});
  ASSERT_EQ(g[0].dtype(), DType::bfloat16);
  ASSERT_EQ(g[1].dtype(), DType::float32);
  ASSERT_EQ(g[2].dtype(), DType::float32);
  for (int64_t p = 0; p < 12; ++p) {
    for (int64_t j = 0; j < 5; ++j) {
      double s = 0;
      for (int64_t i = 0; i < 6; ++i) {
        s += static_cast<double>(h32.data<float>()[i * 12 + p]) * w.data<float>()[i * 5 + j];
      }
      EXPECT_NEAR(g[1].data<float>()[p * 5 + j], s, 1e-5 * (1.0 + std::abs(s)));
    }
  }
  for (int64_t j = 0; j < 5; ++j) {
    double s = 0;
    for (int64_t i = 0; i < 6; ++i) s += w.data<float>()[i * 5 + j];
    EXPECT_NEAR(g[2].data<float>()[j], s, 1e-5 * (1.0 + std::abs(s)));
  }
  Tensor dh = g[0].to(DType::float32);
  for (int64_t i = 0; i < 6; ++i) {
    for (int64_t p = 0; p < 12; ++p) {
      double s = 0;
      for (int64_t j = 0; j < 5; ++j) {
        s += static_cast<double>(w.data<float>()[i * 5 + j]) * k.data<float>()[p * 5 + j];
      }
      EXPECT_NEAR(dh.data<float>()[i * 12 + p], s, 1e-2 * std::abs(s) + 1e-6);
    }
  }
}

}  // namespace
}  // namespace lockstep::keras
