// A small vision transformer (patches by a strided Conv2D, position embeddings, pre-norm blocks of
// MultiHeadAttention and a GELU MLP with residual Adds, global average pooling) trains to the same
// weights on N replicas as on one replica over the same global batches, and trains at all.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "lockstep/distribute/strategies.h"
#include "lockstep/keras.h"
#include "testing/classification_data.h"

namespace lockstep::keras {
namespace {

constexpr int64_t kSide = 8, kPatch = 4, kWidth = 8, kClasses = 3;
// 4 global batches of 24 and a last one of 13 per epoch (13 divides by none of 2, 3, 4).
constexpr int64_t kExamples = 4 * 24 + 13, kGlobalBatch = 24;

Model tiny_vit() {
  using namespace layers;
  constexpr int64_t tokens = (kSide / kPatch) * (kSide / kPatch);
  auto inputs = Input({kSide * kSide});
  auto x = Reshape({kSide, kSide, 1})(inputs);
  x = Conv2D({.filters = kWidth, .kernel_size = {kPatch, kPatch}, .strides = {kPatch, kPatch}})(x);
  x = Reshape({tokens, kWidth})(x);
  x = Add()({x, PositionEmbedding({.sequence_length = tokens})(x)});
  for (int block = 0; block < 2; ++block) {
    auto h = LayerNormalization({.epsilon = 1e-6})(x);
    h = MultiHeadAttention({.num_heads = 2, .key_dim = kWidth / 2})({h, h});
    x = Add()({x, h});
    h = LayerNormalization({.epsilon = 1e-6})(x);
    h = Dense({.units = 2 * kWidth, .activation = "gelu"})(h);
    h = Dense({.units = kWidth})(h);
    x = Add()({x, h});
  }
  x = LayerNormalization({.epsilon = 1e-6})(x);
  x = GlobalAveragePooling1D()(x);
  return Model(inputs, Dense({.units = kClasses, .activation = "softmax"})(x));
}

struct TrainedRun {
  std::vector<Tensor> weights;  // without the attention key biases (see below)
  std::vector<double> loss;
};

// The attention key biases are left out of the comparison: a key bias adds q · b to every score
// of a query row, which the softmax cancels, so their exact gradient is zero and what the backward
// pass computes is rounding noise; Adam divides that noise by its own root mean square and moves
// the biases by up to the learning rate in a direction set by the noise (as in any framework).
bool compared(const Variable& v) {
  const std::string& n = v.name();
  return n.size() < 9 || n.compare(n.size() - 9, 9, "/key/bias") != 0;
}

// The tiny ViT with the same initial weights (seeded initializers), fitted with Adam for 3 epochs
// in `strategy`'s scope.
TrainedRun fit_on(distribute::Strategy& strategy, const Dataset& ds) {
  set_random_seed(77);
  auto scope = strategy.scope();
  Model model = tiny_vit();
  model.compile({.optimizer = optimizers::Adam({.learning_rate = 3e-3}),
                 .loss = losses::CategoricalCrossentropy()});
  callbacks::History h = model.fit(ds, {.epochs = 3, .verbose = 0});
  EXPECT_EQ(model.optimizer().iterations(), 15);
  TrainedRun r{{}, h.history.at("loss")};
  for (const Variable& v : model.weights()) {
    if (compared(v)) r.weights.push_back(v.raw_value().clone());
  }
  EXPECT_EQ(r.weights.size(), model.weights().size() - 2);  // two blocks, one key bias each
  return r;
}

// What re-associating the gradient sums can move a weight by, relative to the 1e-2 floor of
// max_relative_difference, after the 15 Adam updates at lr 3e-3 (the derivation is the one beside
// kReassociationBound in replica_equivalence_test.cpp): updates × lr × 2·K·u·κ / floor, where
// K = 96 is the most per-example terms one gradient element sums (24 examples × 4 tokens, for the
// kernels applied to every token), u = 2^-24 and κ ≤ 1e4 bounds an element's sum of absolute
// terms over its root-mean-square gradient. 15 × 3e-3 × 2 × 96 × 2^-24 × 1e4 / 1e-2 = 0.52, i.e.
// 5.2e-3 absolute at the floor, while Adam moves a weight by up to 0.045 in these 15 steps: loose,
// because Adam's step is nearly sign(g) where the terms almost cancel (the nonlinear ops between
// the sums — softmax, LayerNormalization, GELU — are computed per example and per token, so
// splitting the batch leaves them unchanged); the measured differences are far smaller.
constexpr double kReassociationBound = 15 * 3e-3 * 2 * 96 * 0x1p-24 * 1e4 / 1e-2;

// max |a - b| / max(|b|, 1e-2) over every weight.
double max_relative_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double d = 0;
  for (size_t t = 0; t < a.size(); ++t) {
    const float* pa = a[t].data<float>();
    const float* pb = b[t].data<float>();
    for (int64_t i = 0; i < a[t].num_elements(); ++i) {
      const double diff = std::abs(static_cast<double>(pa[i]) - pb[i]);
      d = std::max(d, diff / std::max(std::abs(static_cast<double>(pb[i])), 1e-2));
    }
  }
  return d;
}

TEST(VitReplicaEquivalence, NReplicasTrainTheTinyVitToTheWeightsOfOneReplica) {
  auto data = lockstep::testing::random_classification(kExamples, kSide * kSide, kClasses, 5);
  Dataset ds = Dataset::from_tensor_slices({data.x, data.y}).batch(kGlobalBatch);
  distribute::MirroredStrategy one(1);
  const TrainedRun expected = fit_on(one, ds);
  // It trained: the loss went down and the weights moved from their initial values.
  EXPECT_LT(expected.loss.back(), expected.loss.front());
  for (int n : {2, 3}) {
    distribute::MirroredStrategy many(n);
    const TrainedRun got = fit_on(many, ds);
    ASSERT_EQ(got.weights.size(), expected.weights.size());
    const double d = max_relative_difference(got.weights, expected.weights);
    std::printf("[ replicas=%d ] max relative weight difference %.3g\n", n, d);
    EXPECT_LE(d, kReassociationBound) << n << " replicas vs 1";
  }
}

// The bound can fail: the same training with the last example of each batch left out of the
// loss (its one-hot label zeroed, so it contributes no gradient) ends beyond it.
TEST(VitReplicaEquivalence, ATrainingMissingOneExampleABatchExceedsTheBound) {
  auto data = lockstep::testing::random_classification(kExamples, kSide * kSide, kClasses, 5);
  Dataset ds = Dataset::from_tensor_slices({data.x, data.y}).batch(kGlobalBatch);
  Dataset missing =
      Dataset::from_tensor_slices(
          {data.x, lockstep::testing::without_last_example_of_each_batch(data.y, kGlobalBatch)})
          .batch(kGlobalBatch);
  distribute::MirroredStrategy one(1);
  const TrainedRun expected = fit_on(one, ds);
  const TrainedRun wrong = fit_on(one, missing);
  const double d = max_relative_difference(wrong.weights, expected.weights);
  std::printf("[ one example a batch missing ] max relative weight difference %.3g\n", d);
  EXPECT_GT(d, kReassociationBound);
}

TEST(VitReplicaEquivalence, TheTinyVitHasTheExpectedParameters) {
  Model model = tiny_vit();
  // Conv2D 4·4·1·8 + 8; position embeddings 4·8; per block: 2 LayerNorms 2·2·8, attention
  // 3·(8·2·4 + 2·4) + 2·4·8 + 8, MLP 8·16 + 16 + 16·8 + 8; final LayerNorm 2·8; head 8·3 + 3.
  const int64_t block =
      2 * 2 * 8 + 3 * (8 * 2 * 4 + 2 * 4) + 2 * 4 * 8 + 8 + 8 * 16 + 16 + 16 * 8 + 8;
  EXPECT_EQ(model.count_params(), 4 * 4 * 8 + 8 + 4 * 8 + 2 * block + 2 * 8 + 8 * 3 + 3);
}

}  // namespace
}  // namespace lockstep::keras
