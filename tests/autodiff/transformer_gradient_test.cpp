// batch_matmul, masked_softmax, gelu_tanh and dot_product_attention gradients (float64) against
// central differences through the shared checker.
#include <gtest/gtest.h>

#include <vector>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/transformer_functions.h"
#include "testing/gradient_check.h"

namespace lockstep {
namespace {

using testing::gradients_match;
using testing::random_f64;
using V = std::vector<Tensor>;

TEST(BatchMatmulGradient, EveryTransposeCombinationMatchesCentralDifferences) {
  Generator gen(21);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = random_f64(gen, ta ? Shape{2, 3, 5, 4} : Shape{2, 3, 4, 5});
      Tensor b = random_f64(gen, tb ? Shape{2, 3, 3, 5} : Shape{2, 3, 5, 3});
      EXPECT_TRUE(gradients_match(
          [ta, tb](const V& in) { return batch_matmul(in[0], in[1], ta, tb); }, {a, b}))
          << "ta=" << ta << " tb=" << tb;
    }
  }
}

TEST(MaskedSoftmaxGradient, MatchesCentralDifferencesWithAndWithoutAMask) {
  Generator gen(22);
  Tensor x = random_f64(gen, {3, 4, 6}, -2, 2);
  EXPECT_TRUE(gradients_match([](const V& in) { return masked_softmax(in[0], Tensor()); }, {x}));
  // [4, 6] pattern with one row that keeps nothing.
  std::vector<uint8_t> bits = {1, 0, 1, 1, 0, 1,  //
                               0, 0, 0, 0, 0, 0,  //
                               1, 1, 1, 1, 1, 1,  //
                               0, 0, 0, 0, 0, 1};
  Tensor mask = Tensor::from_vector(bits, {4, 6});
  EXPECT_TRUE(gradients_match([mask](const V& in) { return masked_softmax(in[0], mask); }, {x}));
}

TEST(GeluGradient, BothFormsMatchCentralDifferences) {
  Generator gen(23);
  Tensor x = random_f64(gen, {5, 7}, -4, 4);
  EXPECT_TRUE(gradients_match([](const V& in) { return gelu_tanh(in[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](const V& in) { return gelu(in[0]); }, {x}));
}

struct AttentionGradientCase {
  const char* name;
  int64_t B, T, S, H, Dk, Dv;
  bool causal;
  int mask;  // 0 none, 2 [T, S], 4 [B, 1, T, S]
  int64_t block;
};

class AttentionGradient : public ::testing::TestWithParam<AttentionGradientCase> {
 protected:
  void TearDown() override { ops::set_attention_block_examples(0); }
};

TEST_P(AttentionGradient, QueryKeyAndValueMatchCentralDifferences) {
  const AttentionGradientCase c = GetParam();
  ops::set_attention_block_examples(c.block);
  Generator gen(24);
  Tensor q = random_f64(gen, {c.B, c.T, c.H, c.Dk}, -1.5, 1.5);
  Tensor k = random_f64(gen, {c.B, c.S, c.H, c.Dk}, -1.5, 1.5);
  Tensor v = random_f64(gen, {c.B, c.S, c.H, c.Dv});
  ops::AttentionOptions options{.is_causal = c.causal};
  if (c.mask != 0) {
    const Shape shape = c.mask == 2 ? Shape{c.T, c.S} : Shape{c.B, 1, c.T, c.S};
    std::vector<uint8_t> bits(static_cast<size_t>(shape.num_elements()));
    for (auto& bit : bits) bit = gen.next_u64() % 3 != 0;
    bits[0] = 0;  // row 0 of example 0 keeps nothing (with the [T, S] mask: of every example)
    bits[1] = 0;
    for (int64_t s = 2; s < c.S; ++s) bits[static_cast<size_t>(s)] = 0;
    options.mask = Tensor::from_vector(bits, shape);
  }
  EXPECT_TRUE(gradients_match(
      [options](const V& in) { return dot_product_attention(in[0], in[1], in[2], options); },
      {q, k, v}));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionGradient,
    ::testing::Values(
        AttentionGradientCase{"SelfAttention", 2, 5, 5, 2, 3, 3, false, 0, 0},
        AttentionGradientCase{"CrossAttentionOddSizes", 3, 4, 6, 3, 2, 5, false, 0, 2},
        AttentionGradientCase{"Causal", 2, 6, 6, 2, 3, 2, true, 0, 1},
        AttentionGradientCase{"SharedMask", 3, 4, 5, 2, 3, 3, false, 2, 2},
        AttentionGradientCase{"PerExampleMaskAndCausal", 2, 5, 5, 2, 2, 3, true, 4, 1}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace lockstep
