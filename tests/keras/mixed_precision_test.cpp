// mixed_bfloat16: policies, Dense under the policy (float32 variables, bfloat16
// activations, float32 softmax and gradients), bfloat16 linear against a float64 reference, and a
// short training run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <random>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/keras.h"
#include "lockstep/ops/matmul.h"
#include "testing/bf16_matmul_mode.h"
#include "testing/policy_guard.h"

namespace lockstep::keras {
namespace {

namespace mp = mixed_precision;

// The policy is process-wide: every test restores float32 so other suites are unaffected.
using lockstep::testing::PolicyGuard;

Tensor random_tensor(const Shape& shape, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, static_cast<float>(scale));
  Tensor t(shape, DType::float32);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

// ||a - ref|| / ||ref||, both read as float64.
double rel_error(const Tensor& a, const Tensor& ref) {
  Tensor x = a.to(DType::float64), r = ref.to(DType::float64);
  EXPECT_EQ(x.num_elements(), r.num_elements());
  double num = 0, den = 0;
  for (int64_t i = 0; i < r.num_elements(); ++i) {
    double d = x.data<double>()[i] - r.data<double>()[i];
    num += d * d;
    den += r.data<double>()[i] * r.data<double>()[i];
  }
  return std::sqrt(num / den);
}

TEST(MixedPrecisionPolicy, NamesMapToComputeAndVariableDtypes) {
  EXPECT_EQ(mp::Policy("float32").compute_dtype(), DType::float32);
  EXPECT_EQ(mp::Policy("float32").variable_dtype(), DType::float32);
  EXPECT_EQ(mp::Policy("mixed_bfloat16").compute_dtype(), DType::bfloat16);
  EXPECT_EQ(mp::Policy("mixed_bfloat16").variable_dtype(), DType::float32);
  EXPECT_EQ(mp::Policy("bfloat16").compute_dtype(), DType::bfloat16);
  EXPECT_EQ(mp::Policy("bfloat16").variable_dtype(), DType::bfloat16);
}

TEST(MixedPrecisionPolicy, UnknownNameIsInvalidArgumentListingTheValidOnes) {
  try {
    mp::Policy("mixed_float16");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("\"float32\", \"mixed_bfloat16\", \"bfloat16\""));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("mixed_float16"));
  }
  EXPECT_THROW(mp::set_global_policy("fp16"), InvalidArgument);
  EXPECT_EQ(mp::global_policy().name(), "float32");
}

TEST(MixedPrecisionPolicy, LayersReadTheGlobalPolicyAtConstruction) {
  layers::Dense before({.units = 2});
  PolicyGuard guard("mixed_bfloat16");
  layers::Dense after({.units = 2});
  layers::Dense forced({.units = 2, .dtype = "float32"});
  EXPECT_EQ(before.dtype_policy().name(), "float32");
  EXPECT_EQ(after.dtype_policy().name(), "mixed_bfloat16");
  EXPECT_EQ(forced.dtype_policy().name(), "float32");
  EXPECT_EQ(after.get_config()["dtype"], "mixed_bfloat16");
}

TEST(MixedPrecisionDense, VariablesStayFloat32AndOutputIsBfloat16) {
  PolicyGuard guard("mixed_bfloat16");
  layers::Dense dense({.units = 4, .activation = "relu"});
  Tensor y = dense(random_tensor({3, 5}, 1));
  EXPECT_EQ(dense.kernel().dtype(), DType::float32);
  EXPECT_EQ(dense.bias().dtype(), DType::float32);
  EXPECT_EQ(y.dtype(), DType::bfloat16);
  EXPECT_EQ(y.shape(), (Shape{3, 4}));
}

TEST(MixedPrecisionDense, SoftmaxOutputIsFloat32AndSumsToOne) {
  PolicyGuard guard("mixed_bfloat16");
  layers::Dense dense({.units = 10, .activation = "softmax"});
  Tensor y = dense(random_tensor({4, 6}, 2));
  ASSERT_EQ(y.dtype(), DType::float32);
  for (int64_t i = 0; i < 4; ++i) {
    double s = 0;
    for (int64_t j = 0; j < 10; ++j) s += y.data<float>()[i * 10 + j];
    EXPECT_NEAR(s, 1.0, 1e-6);
  }
}

TEST(MixedPrecisionDense, Float32OutputLayerTakesBfloat16InputsAndReturnsFloat32) {
  PolicyGuard guard("mixed_bfloat16");
  layers::Dense hidden({.units = 8, .activation = "relu"});
  layers::Dense out({.units = 3, .dtype = "float32"});
  Tensor h = hidden(random_tensor({2, 5}, 3));
  ASSERT_EQ(h.dtype(), DType::bfloat16);
  EXPECT_EQ(out(h).dtype(), DType::float32);
}

TEST(MixedPrecisionDense, GradientsReachingTheOptimizerAreFloat32) {
  PolicyGuard guard("mixed_bfloat16");
  Sequential model({Input({6}), layers::Dense({.units = 16, .activation = "relu"}),
                    layers::Dense({.units = 4, .activation = "softmax"})});
  Tensor x = random_tensor({8, 6}, 4);
  Tensor y = one_hot(Tensor::from_vector<int64_t>({0, 1, 2, 3, 0, 1, 2, 3}, {8}), 4);
  std::vector<Variable> vars = model.trainable_weights();
  ASSERT_EQ(vars.size(), 4u);
  GradientTape tape;
  Tensor loss = losses::CategoricalCrossentropy()(y, model(x, true));
  EXPECT_EQ(loss.dtype(), DType::float32);
  std::vector<Tensor> grads = tape.gradient(loss, vars);
  for (size_t i = 0; i < vars.size(); ++i) {
    EXPECT_EQ(vars[i].dtype(), DType::float32) << vars[i].name();
    ASSERT_TRUE(grads[i].defined()) << vars[i].name();
    EXPECT_EQ(grads[i].dtype(), DType::float32) << vars[i].name();
    EXPECT_EQ(grads[i].shape(), vars[i].shape()) << vars[i].name();
  }
}

// Forward and backward of act(x·kernel + bias) in bfloat16 (float32 accumulation) against float64
// loops on the unrounded float32 inputs: the error includes rounding the operands to bfloat16.
// Shapes cover the seed model's layers and a wide layer, each with both ways of multiplying
// bfloat16 operands (oneDNN's bfloat16 kernels, and widening to float32), whichever the machine
// would pick.
class Bf16Linear : public ::testing::TestWithParam<
                       std::tuple<std::tuple<int64_t, int64_t, int64_t>, ops::Bf16MatmulMode>> {};

TEST_P(Bf16Linear, ForwardAndBackwardMatchFloat64WithinBf16Tolerance) {
  auto [shape, mode] = GetParam();
  auto [batch, in, out] = shape;
  lockstep::testing::Bf16MatmulModeGuard guard(mode);
  Tensor x32 = random_tensor({batch, in}, 10);
  Tensor k32 = random_tensor({in, out}, 11, 1.0 / std::sqrt(static_cast<double>(in)));
  Tensor b32 = random_tensor({out}, 12, 0.1);
  Tensor w32 = random_tensor({batch, out}, 13);  // loss = Σ w ⊙ y
  Variable kernel(k32.to(DType::float32), "kernel"), bias(b32.to(DType::float32), "bias");

  GradientTape tape;
  Tensor x = x32;
  tape.watch(x);
  Tensor y = linear(cast(x, DType::bfloat16), cast(kernel.value(), DType::bfloat16),
                    cast(bias.value(), DType::bfloat16), ops::FusedActivation::relu);
  ASSERT_EQ(y.dtype(), DType::bfloat16);
  Tensor loss = reduce_sum(mul(cast(y, DType::float32), w32));
  std::vector<Tensor> g = tape.gradient(loss, std::vector<Tensor>{x, kernel.value(), bias.value()});

  // float64 reference.
  Tensor X = x32.to(DType::float64), K = k32.to(DType::float64), B = b32.to(DType::float64),
         W = w32.to(DType::float64);
  Tensor Y({batch, out}, DType::float64), DX = Tensor::zeros({batch, in}, DType::float64),
                                          DK = Tensor::zeros({in, out}, DType::float64),
                                          DB = Tensor::zeros({out}, DType::float64);
  const double *xp = X.data<double>(), *kp = K.data<double>(), *bp = B.data<double>(),
               *wp = W.data<double>();
  Tensor y32 = y.to(DType::float32);
  for (int64_t i = 0; i < batch; ++i) {
    for (int64_t j = 0; j < out; ++j) {
      double z = bp[j];
      for (int64_t p = 0; p < in; ++p) z += xp[i * in + p] * kp[p * out + j];
      Y.data<double>()[i * out + j] = z > 0 ? z : 0;
      // relu's derivative at the point the kernel computed: where |z| is within bfloat16 rounding
      // of 0 the sign can differ from float64's, and that step is not a precision error.
      double dz = y32.data<float>()[i * out + j] > 0 ? wp[i * out + j] : 0;
      DB.data<double>()[j] += dz;
      for (int64_t p = 0; p < in; ++p) {
        DK.data<double>()[p * out + j] += xp[i * in + p] * dz;
        DX.data<double>()[i * in + p] += dz * kp[p * out + j];
      }
    }
  }
  EXPECT_LT(rel_error(y, Y), 1e-2);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0].dtype(), DType::float32);
  EXPECT_EQ(g[1].dtype(), DType::float32);
  EXPECT_EQ(g[2].dtype(), DType::float32);
  EXPECT_LT(rel_error(g[0], DX), 1e-2);
  EXPECT_LT(rel_error(g[1], DK), 1e-2);
  EXPECT_LT(rel_error(g[2], DB), 1e-2);
  EXPECT_EQ(kernel.dtype(), DType::float32);
  EXPECT_EQ(bias.dtype(), DType::float32);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Bf16Linear,
    ::testing::Combine(::testing::Values(std::make_tuple(128, 784, 128),
                                         std::make_tuple(128, 128, 10),
                                         std::make_tuple(64, 512, 512)),
                       ::testing::Values(ops::Bf16MatmulMode::bfloat16_kernels,
                                         ops::Bf16MatmulMode::float32_compute)),
    [](const auto& info) {
      const auto& shape = std::get<0>(info.param);
      return std::to_string(std::get<0>(shape)) + "x" + std::to_string(std::get<1>(shape)) + "x" +
             std::to_string(std::get<2>(shape)) +
             (std::get<1>(info.param) == ops::Bf16MatmulMode::bfloat16_kernels ? "_bf16_kernels"
                                                                               : "_f32_compute");
    });

// A short fit of a small classifier under `policy`: 4 separable Gaussian blobs in 8 dimensions,
// 80 Adam steps. Returns the history and checks the variables stayed float32.
//
// History: this test was once disabled because "the loss rose (0.75 -> 0.97)". It did not: the
// failure message prints 0.5 * loss.front() (0.75 = half of the first epoch's 1.50), and the loss
// fell 1.50 -> 0.97 under float32 and mixed_bfloat16 alike; Adam at its default 1e-3 simply does
// not halve the loss in 80 steps. The learning rate is now 1e-2, and float32 runs as the control.
callbacks::History fit_blobs(const std::string& policy) {
  PolicyGuard guard(policy);
  set_random_seed(5);
  const int64_t n = 512;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> noise(0.0f, 0.5f);
  Tensor x({n, 8}, DType::float32), labels({n}, DType::int64);
  for (int64_t i = 0; i < n; ++i) {
    int64_t c = i % 4;
    labels.data<int64_t>()[i] = c;
    for (int64_t j = 0; j < 8; ++j) {
      x.data<float>()[i * 8 + j] = noise(rng) + (j == 2 * c ? 2.0f : 0.0f);
    }
  }
  Tensor y = one_hot(labels, 4);
  Sequential model({Input({8}), layers::Dense({.units = 32, .activation = "relu"}),
                    layers::Dense({.units = 4, .activation = "softmax"})});
  model.compile({.optimizer = optimizers::Adam({.learning_rate = 1e-2}),
                 .loss = losses::CategoricalCrossentropy(),
                 .metrics = {metrics::CategoricalAccuracy()}});
  auto history = model.fit(x, y, {.epochs = 5, .verbose = 0, .batch_size = 32});
  for (const Variable& v : model.weights()) EXPECT_EQ(v.dtype(), DType::float32) << v.name();
  return history;
}

class MixedPrecisionTraining : public ::testing::TestWithParam<std::string> {};

TEST_P(MixedPrecisionTraining, FitLowersTheLossAndKeepsFloat32Weights) {
  auto history = fit_blobs(GetParam());
  const auto& loss = history.history.at("loss");
  ASSERT_EQ(loss.size(), 5u);
  for (size_t e = 1; e < loss.size(); ++e) EXPECT_LT(loss[e], loss[e - 1]) << "epoch " << e;
  EXPECT_LT(loss.back(), 0.5 * loss.front());
  EXPECT_GT(history.history.at("categorical_accuracy").back(), 0.9);
}

INSTANTIATE_TEST_SUITE_P(Policies, MixedPrecisionTraining,
                         ::testing::Values("float32", "mixed_bfloat16"));

// Same data, seed and batches: bfloat16 rounding perturbs the trajectory only slightly.
TEST(MixedPrecisionTrainingVsFloat32, LossTracksTheFloat32RunWithinFivePercent) {
  const auto fp = fit_blobs("float32").history.at("loss");
  const auto mp = fit_blobs("mixed_bfloat16").history.at("loss");
  ASSERT_EQ(fp.size(), mp.size());
  for (size_t e = 0; e < fp.size(); ++e) EXPECT_NEAR(mp[e], fp[e], 0.05 * fp[e]) << "epoch " << e;
}

}  // namespace
}  // namespace lockstep::keras
