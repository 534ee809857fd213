// A mixed_bfloat16 model (relu layer, linear layer) against float64 loops on the unrounded
// inputs and weights, within error bounds derived beside each check from where the policy rounds:
// inputs, weights, each layer's output and each kernel's gradient to bfloat16 (unit roundoff
// u = 2^-8), sums in float32
// (gamma_n = n 2^-24 / (1 - n 2^-24) of the sum of magnitudes). The same bounds hold for oneDNN's
// bfloat16 kernels and for the policy's float32 form (float32 kernels on bfloat16 values, where
// oneDNN has no bfloat16 math or its bfloat16 kernels are not faster: the isa label runs this
// under LOCKSTEP_MAX_CPU_ISA=AVX2 and SSE41, and under AVX512_CORE_BF16 on an Intel core).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/core/bfloat16.h"
#include "lockstep/keras.h"
#include "lockstep/ops/cpu_kernels.h"
#include "lockstep/ops/matmul.h"
#include "testing/policy_guard.h"

namespace lockstep::keras {
namespace {

constexpr int64_t kBatch = 24, kIn = 40, kHidden = 48, kOut = 12;
constexpr double kU = 1.0 / 256;  // bfloat16's unit roundoff

double gamma32(int64_t n) {
  const double nu = static_cast<double>(n) * std::ldexp(1.0, -24);
  return nu / (1 - nu);
}

std::vector<double> random_values(int64_t n, uint64_t seed, bool bfloat16_values = false) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) {
    x = d(rng);
    if (bfloat16_values) x = round_to_bfloat16_value(static_cast<float>(x));
  }
  return v;
}

Tensor as_float32(const std::vector<double>& v, const Shape& shape) {
  std::vector<float> f(v.begin(), v.end());
  return Tensor::from_vector<float>(f, shape);
}

// v as float32 would hold it: what the test hands the model.
std::vector<double> through_float32(std::vector<double> v) {
  for (double& x : v) x = static_cast<float>(x);
  return v;
}

TEST(MixedBfloat16Bounds, ForwardAndWeightGradientsStayWithinTheDerivedBounds) {
  lockstep::testing::PolicyGuard guard("mixed_bfloat16");
  Sequential model({Input({kIn}), layers::Dense({.units = kHidden, .activation = "relu"}),
                    layers::Dense({.units = kOut})});
  const std::vector<double> x = through_float32(random_values(kBatch * kIn, 1));
  const std::vector<double> w1 = through_float32(random_values(kIn * kHidden, 2));
  const std::vector<double> b1 = through_float32(random_values(kHidden, 3));
  const std::vector<double> w2 = through_float32(random_values(kHidden * kOut, 4));
  const std::vector<double> b2 = through_float32(random_values(kOut, 5));
  // dloss/dy: bfloat16 values, so the gradient reaching the bfloat16 output is exact.
  const std::vector<double> g = random_values(kBatch * kOut, 6, /*bfloat16_values=*/true);
  model(as_float32(x, {kBatch, kIn}));  // builds
  std::vector<Variable> vars = model.trainable_weights();
  ASSERT_EQ(vars.size(), 4u);
  vars[0].assign(as_float32(w1, {kIn, kHidden}));
  vars[1].assign(as_float32(b1, {kHidden}));
  vars[2].assign(as_float32(w2, {kHidden, kOut}));
  vars[3].assign(as_float32(b2, {kOut}));

  GradientTape tape;
  Tensor y = model(as_float32(x, {kBatch, kIn}), /*training=*/true);
  ASSERT_EQ(y.dtype(), DType::bfloat16);  // the policy's output dtype on every path
  Tensor loss = reduce_sum(mul(cast(y, DType::float32), as_float32(g, {kBatch, kOut})));
  std::vector<Tensor> grads = tape.gradient(loss, vars);
  ASSERT_EQ(grads.size(), 4u);
  const Tensor y64 = y.to(DType::float64), dw1 = grads[0].to(DType::float64),
               dw2 = grads[2].to(DType::float64);

  // Layer 1: z1 = x·w1 + b1 on rounded operands. Each product of two rounded values is within
  // (1+u)^2 - 1 of the exact one; the float32 sum adds gamma_{kIn+1} of the magnitudes; the relu
  // output is rounded once more (u of its value, itself within e_z of the exact one).
  const double e_prod = (1 + kU) * (1 + kU) - 1, g_in = gamma32(kIn + 1);
  std::vector<double> h(kBatch * kHidden), e_h(kBatch * kHidden), z1(kBatch * kHidden);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t j = 0; j < kHidden; ++j) {
      double z = b1[j], mag = std::fabs(b1[j]);
      for (int64_t i = 0; i < kIn; ++i) {
        z += x[b * kIn + i] * w1[i * kHidden + j];
        mag += std::fabs(x[b * kIn + i] * w1[i * kHidden + j]);
      }
      const double e_z = e_prod * mag + g_in * (1 + e_prod) * mag;
      z1[b * kHidden + j] = z;
      h[b * kHidden + j] = z > 0 ? z : 0;
      e_h[b * kHidden + j] = e_z + kU * (std::fabs(h[b * kHidden + j]) + e_z);
    }
  }
  // Layer 2 and the output: the rounded inputs carry e_h; the weights and bias are rounded (u);
  // the float32 sum adds gamma_{kHidden+1}; the bfloat16 output is rounded once (u).
  const double g_hidden = gamma32(kHidden + 1);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t k = 0; k < kOut; ++k) {
      double z = b2[k], mag = std::fabs(b2[k]), carried = 0;
      for (int64_t j = 0; j < kHidden; ++j) {
        const double w = w2[j * kOut + k];
        z += h[b * kHidden + j] * w;
        mag += (std::fabs(h[b * kHidden + j]) + e_h[b * kHidden + j]) * std::fabs(w);
        carried += e_h[b * kHidden + j] * std::fabs(w);
      }
      const double e_z = carried + kU * mag + g_hidden * (1 + kU) * mag;
      // bound: the above plus the output's rounding, u (|z| + e_z).
      const double bound = e_z + kU * (std::fabs(z) + e_z);
      EXPECT_LE(std::fabs(y64.data<double>()[b * kOut + k] - z), bound)
          << "y[" << b << "][" << k << "]";
    }
  }
  // dloss/dw2 = hᵀ·g: g is exact, h carries e_h, the float32 sum of kBatch terms adds
  // gamma_kBatch of the magnitudes.
  const double g_batch = gamma32(kBatch);
  for (int64_t j = 0; j < kHidden; ++j) {
    for (int64_t k = 0; k < kOut; ++k) {
      double ref = 0, carried = 0, mag = 0;
      for (int64_t b = 0; b < kBatch; ++b) {
        const double gb = g[b * kOut + k];
        ref += h[b * kHidden + j] * gb;
        carried += e_h[b * kHidden + j] * std::fabs(gb);
        mag += (std::fabs(h[b * kHidden + j]) + e_h[b * kHidden + j]) * std::fabs(gb);
      }
      // bound: carried error plus the float32 sum's, then the kernel's gradient rounded to
      // bfloat16 (the gradient of its bfloat16 values): u of it.
      const double summed = carried + g_batch * mag;
      EXPECT_LE(std::fabs(dw2.data<double>()[j * kOut + k] - ref),
                summed + kU * (std::fabs(ref) + summed))
          << "dw2[" << j << "][" << k << "]";
    }
  }
  // dloss/dw1 = x̂ᵀ·dz1, dz1 = round(g·ŵ2ᵀ) masked by relu. dh = g·w2ᵀ on rounded weights,
  // summed in float32 and rounded as a bfloat16 gradient: within ((1+u)^2 (1+gamma) - 1) of the
  // magnitudes. Where |z1| <= e_z1 the mask may differ from the exact one: the term then counts
  // whole (|x| (|dh| + e_dh)). x̂ is within u of x.
  const double g_out = gamma32(kOut);
  std::vector<double> dh(kBatch * kHidden), e_dh(kBatch * kHidden);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t j = 0; j < kHidden; ++j) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < kOut; ++k) {
        s += g[b * kOut + k] * w2[j * kOut + k];
        mag += std::fabs(g[b * kOut + k] * w2[j * kOut + k]);
      }
      dh[b * kHidden + j] = s;
      e_dh[b * kHidden + j] = ((1 + kU) * (1 + kU) * (1 + g_out) - 1) * mag;
    }
  }
  for (int64_t i = 0; i < kIn; ++i) {
    for (int64_t j = 0; j < kHidden; ++j) {
      double ref = 0, err = 0, mag = 0;
      for (int64_t b = 0; b < kBatch; ++b) {
        const double xv = x[b * kIn + i], z = z1[b * kHidden + j], d = dh[b * kHidden + j];
        const double ed = e_dh[b * kHidden + j];
        const double e_z = (e_h[b * kHidden + j] - kU * std::fabs(h[b * kHidden + j])) / (1 + kU);
        const double dz = z > 0 ? d : 0;
        ref += xv * dz;
        const bool mask_may_differ = std::fabs(z) <= e_z;
        const double dz_mag = z > 0 || mask_may_differ ? std::fabs(d) + ed : 0;
        err += mask_may_differ ? std::fabs(xv) * (1 + kU) * dz_mag
                               : kU * std::fabs(xv) * dz_mag + std::fabs(xv) * (z > 0 ? ed : 0);
        mag += std::fabs(xv) * (1 + kU) * dz_mag;
      }
      // bound: the per-term errors plus the float32 sum's, then the rounding to bfloat16.
      const double summed = err + g_batch * mag;
      EXPECT_LE(std::fabs(dw1.data<double>()[i * kHidden + j] - ref),
                summed + kU * (std::fabs(ref) + summed))
          << "dw1[" << i << "][" << j << "]";
    }
  }
  for (const Tensor& grad : grads) EXPECT_EQ(grad.dtype(), DType::float32);
  // The kernels' gradients are their bfloat16 values' (rounded to bfloat16), the biases' float32
  // sums (not all bfloat16 values).
  auto bfloat16_valued = [](const Tensor& t) {
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      const float v = t.data<float>()[i];
      if (round_to_bfloat16_value(v) != v) return false;
    }
    return true;
  };
  EXPECT_TRUE(bfloat16_valued(grads[0]));
  EXPECT_TRUE(bfloat16_valued(grads[2]));
  EXPECT_FALSE(bfloat16_valued(grads[1]));
}

// The policy's float32 form rounds where a bfloat16 tensor would be stored: inside a model the
// layers hand each other float32 tensors of bfloat16 values, and the gradient that leaves a layer
// for its input is rounded as a bfloat16 gradient is. Natively they are bfloat16 tensors. Either
// way every value is a bfloat16 value.
bool all_bfloat16_values(const Tensor& t) {
  if (t.dtype() == DType::bfloat16) return true;
  const Tensor f = t.to(DType::float32);
  for (int64_t i = 0; i < f.num_elements(); ++i) {
    const float v = f.data<float>()[i];
    if (round_to_bfloat16_value(v) != v) return false;
  }
  return true;
}

TEST(MixedBfloat16Bounds, ActivationsAndInputGradientsAreBfloat16ValuesOnEveryPath) {
  lockstep::testing::PolicyGuard guard("mixed_bfloat16");
  layers::Dense first({.units = kHidden, .activation = "gelu"});
  layers::Dense second({.units = kOut, .activation = "relu"});
  const Tensor x = as_float32(random_values(kBatch * kIn, 7), {kBatch, kIn});
  first(x);
  EXPECT_EQ(first.computes_bfloat16_in_float32(), ops::mixed_bfloat16_computes_in_f32());
  Variable input(x, "input");
  GradientTape tape;
  Tensor h, y;
  {
    // Inner calls, as inside a model: the float32 form passes float32 between them.
    detail::LayerCallScope model_call;
    h = first(input.value(), true);
    y = second(h, true);
  }
  EXPECT_EQ(h.dtype(), first.computes_bfloat16_in_float32() ? DType::float32 : DType::bfloat16);
  EXPECT_TRUE(all_bfloat16_values(h));
  EXPECT_TRUE(all_bfloat16_values(y));
  Tensor loss = reduce_sum(
      mul(cast(y, DType::float32), as_float32(random_values(kBatch * kOut, 8), {kBatch, kOut})));
  std::vector<Tensor> dx = tape.gradient(loss, std::vector<Variable>{input});
  ASSERT_EQ(dx.size(), 1u);
  EXPECT_TRUE(all_bfloat16_values(dx[0]));
  EXPECT_FALSE(all_bfloat16_values(x));  // the check can fail: the raw input is not rounded
}

// The float32 form rounds a layer's own results in place when nothing else holds them; a caller's
// tensor is never one of them, even when the caller holds its only handle.
TEST(MixedBfloat16Bounds, ALayerLeavesItsCallersTensorsAsTheyWere) {
  lockstep::testing::PolicyGuard guard("mixed_bfloat16");
  const std::vector<double> v = random_values(kBatch * kIn, 9);
  layers::LayerNormalization norm;
  layers::Dense dense({.units = kOut});
  layers::Dropout dropout({.rate = 0.5});
  layers::Add add;
  Tensor x = as_float32(v, {kBatch, kIn}), other = as_float32(v, {kBatch, kIn});
  norm(x);
  dense(x);
  dropout(x);  // inference: the input itself comes back
  add(std::vector<Tensor>{x, other});
  for (const Tensor* t : {&x, &other}) {
    for (int64_t i = 0; i < t->num_elements(); ++i) {
      ASSERT_EQ(t->data<float>()[i], static_cast<float>(v[static_cast<size_t>(i)])) << i;
    }
  }
}

// Inside a functional model, a layer whose output only Adds read leaves it unrounded (each Add
// rounds what it reads): the model gives the bits of the same layers called one by one, each
// rounding its own output (the isa label runs this in the float32 form, where that matters).
TEST(MixedBfloat16Bounds, AModelsResidualAddsGiveTheBitsOfTheLayersCalledOneByOne) {
  lockstep::testing::PolicyGuard guard("mixed_bfloat16");
  auto dense = std::make_shared<layers::Dense>(layers::DenseOptions{.units = kIn});
  auto mha = std::make_shared<layers::MultiHeadAttention>(
      layers::MultiHeadAttentionOptions{.num_heads = 2, .key_dim = 8});
  auto add1 = std::make_shared<layers::Add>(), add2 = std::make_shared<layers::Add>();
  auto pool = std::make_shared<layers::GlobalAveragePooling1D>();
  const KerasTensor in = Input({5, kIn});
  const KerasTensor r1 = (*add1)({in, (*dense)(in)});
  const KerasTensor r2 = (*add2)({(*mha)(r1), r1});
  Model model(in, (*pool)(r2));
  const Tensor x = as_float32(random_values(3 * 5 * kIn, 10), {3, 5, kIn});
  const Tensor w = as_float32(random_values(3 * kIn, 11), {3, kIn});
  auto loss_of = [&w](const Tensor& y) { return reduce_sum(mul(cast(y, DType::float32), w)); };

  GradientTape by_model;
  by_model.watch(x);
  const Tensor y_model = model(x, true);
  const std::vector<Variable> vars = model.trainable_weights();
  const std::vector<Tensor> g_model = by_model.gradient(loss_of(y_model), vars);

  GradientTape by_layers;
  by_layers.watch(x);
  Tensor y_layers;
  {
    detail::LayerCallScope model_call;  // the layers' calls are inner ones, as in a model
    const Tensor h1 = (*add1)(std::vector<Tensor>{x, (*dense)(x, true)}, true);
    const Tensor h2 = (*add2)(std::vector<Tensor>{(*mha)(h1, true), h1}, true);
    y_layers = (*pool)(h2, true);
  }
  y_layers = cast(y_layers, y_model.dtype());  // the model's outermost call narrows its output
  const std::vector<Tensor> g_layers = by_layers.gradient(loss_of(y_layers), vars);

  ASSERT_EQ(y_model.shape(), y_layers.shape());
  EXPECT_EQ(0, std::memcmp(y_model.raw_data(), y_layers.raw_data(), y_model.nbytes()));
  ASSERT_EQ(g_model.size(), g_layers.size());
  for (size_t i = 0; i < g_model.size(); ++i) {
    SCOPED_TRACE(vars[i].name());
    ASSERT_EQ(g_model[i].nbytes(), g_layers[i].nbytes());
    EXPECT_EQ(0, std::memcmp(g_model[i].raw_data(), g_layers[i].raw_data(), g_model[i].nbytes()));
  }
}

}  // namespace
}  // namespace lockstep::keras
