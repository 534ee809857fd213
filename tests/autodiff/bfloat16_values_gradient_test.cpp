// mixed_bfloat16's float32 form rounds some outputs (and their gradients) inside the kernels that
// write them instead of in passes of their own (layer_norm, add_to_bfloat16_values,
// dot_product_attention with bfloat16_values). Through the tape, each must give the bits of the
// op followed by to_bfloat16_values, whose forward and backward rounding is checked against the
// scalar rounding in tests/ops/bf16_round_test.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/nn_functions.h"
#include "lockstep/autodiff/transformer_functions.h"

namespace lockstep {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor random_f32(const Shape& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.5f);
  std::vector<float> v(static_cast<size_t>(shape.num_elements()));
  for (float& x : v) x = d(rng);
  return Tensor::from_vector(v, shape);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

struct Run {
  Tensor y;
  std::vector<Tensor> grads;
};

// y = f(inputs) and the gradients of Σ y·w (w fixed weights, so that each output element's
// gradient differs) with respect to the inputs.
Run run(const Fn& f, const std::vector<Tensor>& inputs, unsigned seed) {
  GradientTape tape;
  for (const Tensor& t : inputs) tape.watch(t);
  Tensor y = f(inputs);
  const Tensor w = random_f32(y.shape(), seed);
  Tensor loss = reduce_sum(mul(y, w));
  return {y, tape.gradient(loss, inputs)};
}

void expect_same_bits(const Fn& fused, const Fn& unfused, const std::vector<Tensor>& inputs) {
  const Run a = run(fused, inputs, 99), b = run(unfused, inputs, 99);
  EXPECT_TRUE(a.y.holds_bfloat16_values());
  EXPECT_TRUE(same_bits(a.y, b.y));
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    SCOPED_TRACE("gradient of input " + std::to_string(i));
    EXPECT_TRUE(same_bits(a.grads[i], b.grads[i]));
  }
}

TEST(Bfloat16ValuesGradient, LayerNormRoundingAsItStoresIsTheRoundingAfterIt) {
  const std::vector<Tensor> in{to_bfloat16_values(random_f32({6, 37}, 1)), random_f32({37}, 2),
                               random_f32({37}, 3)};
  expect_same_bits(
      [](const std::vector<Tensor>& t) { return layer_norm(t[0], t[1], t[2], 1e-3, true); },
      [](const std::vector<Tensor>& t) {
        return to_bfloat16_values(layer_norm(t[0], t[1], t[2], 1e-3));
      },
      in);
}

TEST(Bfloat16ValuesGradient, AddRoundingAsItStoresIsTheRoundingAfterIt) {
  const std::vector<Tensor> in{random_f32({5, 11}, 4), random_f32({5, 11}, 5)};
  expect_same_bits([](const std::vector<Tensor>& t) { return add_to_bfloat16_values(t[0], t[1]); },
                   [](const std::vector<Tensor>& t) { return to_bfloat16_values(add(t[0], t[1])); },
                   in);
}

TEST(Bfloat16ValuesGradient, AttentionRoundingAsItReadsAndStoresIsTheRoundingAroundIt) {
  // q, k and v as raw projections: the unfused form rounds them (to_bfloat16_values, whose
  // backward rounds their gradients) and the output; the fused kernel reads them rounded and
  // stores the output and the gradients rounded.
  const Shape shape{2, 9, 3, 5};
  const std::vector<Tensor> in{random_f32(shape, 6), random_f32(shape, 7), random_f32(shape, 8)};
  expect_same_bits(
      [](const std::vector<Tensor>& t) {
        return dot_product_attention(t[0], t[1], t[2], {.bfloat16_values = true});
      },
      [](const std::vector<Tensor>& t) {
        return to_bfloat16_values(dot_product_attention(
            to_bfloat16_values(t[0]), to_bfloat16_values(t[1]), to_bfloat16_values(t[2])));
      },
      in);
}

}  // namespace
}  // namespace lockstep
