// mixed_bfloat16's float32 form rounds some outputs (and their gradients) inside the kernels that
// write them instead of in passes of their own (add_to_bfloat16_values, dot_product_attention
// with bfloat16_values). Through the tape, each must give the bits of the op followed by
// to_bfloat16_values, whose forward and backward rounding is checked against the scalar rounding
// in tests/ops/bf16_round_test.cpp. layer_norm's float32-arithmetic form is checked against the
// ops it records.
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
#include "lockstep/core/bfloat16.h"
#include "lockstep/ops/nn_norm.h"

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

// layer_norm with bfloat16_values computes in float32 (as a bfloat16 kernel does; its bounds
// against float64 are in tests/ops/nn_norm_test.cpp), so it is not the double-precision op
// followed by a rounding: through the tape it gives the bits of the ops' own forward and backward.
TEST(Bfloat16ValuesGradient, LayerNormOfBfloat16ValuesRecordsTheOpsForwardAndBackward) {
  const std::vector<Tensor> in{to_bfloat16_values(random_f32({6, 37}, 1)), random_f32({37}, 2),
                               random_f32({37}, 3)};
  const Fn fused = [](const std::vector<Tensor>& t) {
    return layer_norm(t[0], t[1], t[2], 1e-3, true);
  };
  const lockstep::Run a = run(fused, in, 99);
  const ops::LayerNormResult f = ops::layer_norm_forward(in[0], in[1], in[2], 1e-3, true);
  const Tensor dy = random_f32(f.output.shape(), 99);  // the gradient of Σ y·w: w
  const ops::NormGrads g = ops::layer_norm_backward(dy, in[0], in[1], f.mean, f.inv_std, true);
  EXPECT_TRUE(a.y.holds_bfloat16_values());
  EXPECT_TRUE(same_bits(a.y, f.output));
  ASSERT_EQ(a.grads.size(), 3u);
  EXPECT_TRUE(same_bits(a.grads[0], g.x));
  EXPECT_TRUE(same_bits(a.grads[1], g.gamma));
  EXPECT_TRUE(same_bits(a.grads[2], g.beta));
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

TEST(Bfloat16ValuesGradient, GeluRoundingAsItStoresIsTheRoundingAfterIt) {
  // 300 x 250 outputs: two whole chunks of the rounding gelu and a tail.
  const std::vector<Tensor> in{to_bfloat16_values(random_f32({300, 16}, 9)),
                               to_bfloat16_values(random_f32({16, 250}, 10)),
                               to_bfloat16_values(random_f32({250}, 11))};
  const auto gelu = ops::FusedActivation::gelu;
  expect_same_bits(
      [gelu](const std::vector<Tensor>& t) {
        return linear(t[0], t[1], t[2], gelu, LinearOperands{}, DType::float32, true);
      },
      [gelu](const std::vector<Tensor>& t) {
        return to_bfloat16_values(linear(t[0], t[1], t[2], gelu, LinearOperands{}, DType::float32));
      },
      in);
}

// A gradient read rounded (to_bfloat16_values' backward) that several ops contribute to: the tape
// rounds the sum as it adds the last contribution in. Integer-valued terms below 2^24 make every
// partial sum exact in float32 whatever the order, so the expected gradient is the rounding of
// the exact sum; rounding to bfloat16's 8 significant bits then changes most of them.
TEST(Bfloat16ValuesGradient, ASummedGradientIsRoundedOnceAfterTheLastContribution) {
  const int64_t n = 64;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> ints(-(1 << 20), 1 << 20);
  std::vector<float> a(n), w1(n), w2(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(ints(rng));
    w1[i] = static_cast<float>(ints(rng));
    w2[i] = static_cast<float>(ints(rng));
  }
  const Tensor ta = Tensor::from_vector(a, {n}), tw1 = Tensor::from_vector(w1, {n}),
               tw2 = Tensor::from_vector(w2, {n});
  // loss = Σ x·w1 + Σ x·x + Σ x·w2 with x = to_bfloat16_values(a), the readers recorded in the
  // orders below (x·x contributes twice from one record): dloss/da = round(w1 + 2x + w2).
  const std::vector<std::vector<int>> orders{{0, 1, 2}, {1, 0, 2}, {2, 0, 1}, {0, 2, 1}};
  for (const auto& order : orders) {
    SCOPED_TRACE(::testing::Message() << "readers in order " << order[0] << order[1] << order[2]);
    GradientTape tape;
    tape.watch(ta);
    const Tensor x = to_bfloat16_values(ta);
    std::vector<Tensor> terms(3);
    for (int r : order) {
      terms[static_cast<size_t>(r)] = reduce_sum(r == 0   ? mul(x, tw1)
                                                 : r == 1 ? mul(x, x)
                                                          : mul(x, tw2));
    }
    const Tensor loss = add(add(terms[0], terms[1]), terms[2]);
    const Tensor g = tape.gradient(loss, std::vector<Tensor>{ta})[0];
    ASSERT_EQ(g.shape(), Shape({n}));
    EXPECT_TRUE(g.holds_bfloat16_values());
    int changed = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float xi = round_to_bfloat16_value(a[i]);
      const double exact = static_cast<double>(w1[i]) + 2.0 * xi + static_cast<double>(w2[i]);
      const float expected = round_to_bfloat16_value(static_cast<float>(exact));
      changed += expected != static_cast<float>(exact);
      EXPECT_EQ(g.data<float>()[i], expected) << "element " << i;
    }
    EXPECT_GT(changed, n / 2);  // the rounding is there to be seen
  }
}

TEST(Bfloat16ValuesGradient, LinearRoundingAsTheMatmulWritesIsTheRoundingAfterIt) {
  // 1100 rows of 64 outputs: a whole block of the rounding matmul and a tail.
  const std::vector<Tensor> in{to_bfloat16_values(random_f32({1100, 16}, 12)),
                               to_bfloat16_values(random_f32({16, 64}, 13)),
                               to_bfloat16_values(random_f32({64}, 14))};
  expect_same_bits(
      [](const std::vector<Tensor>& t) { return linear_to_bfloat16_values(t[0], t[1], t[2]); },
      [](const std::vector<Tensor>& t) { return to_bfloat16_values(linear(t[0], t[1], t[2])); },
      in);
}

// rounded_as_recorded: a caller-held rounding recorded as the conversion it stands for. Through
// the tape, the bits of cast(x, bfloat16) / round_to_bfloat16(x), forward and backward, on a new
// handle of the caller's storage.
TEST(RoundedAsRecorded, GivesTheBitsOfTheConversionItStandsFor) {
  const Tensor x = random_f32({7, 5}, 21);
  const Tensor w = random_f32({7, 5}, 22);
  for (bool bf16 : {true, false}) {
    SCOPED_TRACE(bf16 ? "bfloat16" : "float32 values");
    const Tensor held = bf16 ? x.to(DType::bfloat16) : round_to_bfloat16(x);
    auto run = [&](bool precomputed) {
      GradientTape tape;
      tape.watch(x);
      Tensor y = precomputed ? rounded_as_recorded(x, held)
                             : (bf16 ? cast(x, DType::bfloat16) : round_to_bfloat16(x));
      Tensor loss = reduce_sum(mul(cast(y, DType::float32), w));
      return std::vector<Tensor>{y, tape.gradient(loss, std::vector<Tensor>{x})[0]};
    };
    const std::vector<Tensor> got = run(true), want = run(false);
    EXPECT_TRUE(same_bits(got[0], want[0]));
    EXPECT_TRUE(same_bits(got[1], want[1]));
    EXPECT_TRUE(got[0].shares_storage_with(held));
    EXPECT_NE(got[0].id(), held.id());
  }
  EXPECT_THROW(rounded_as_recorded(x, Tensor::zeros({5, 7}, DType::bfloat16)), InvalidArgument);
  EXPECT_THROW(rounded_as_recorded(x.to(DType::float64), x.to(DType::bfloat16)), InvalidArgument);
}

}  // namespace
}  // namespace lockstep
