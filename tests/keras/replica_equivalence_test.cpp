// N replicas on a global batch compute what one replica computes on the same global batch
// (docs/architecture.md, "Loss scaling across replicas"), and a run is bit-for-bit reproducible.
//
// These live with the keras tests because they train a model; tests/distribute must not depend
// on keras.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "lockstep/distribute/strategies.h"
#include "lockstep/keras.h"
#include "testing/classification_data.h"

namespace lockstep::keras {
namespace {

constexpr int64_t kInputs = 784, kHidden = 128, kClasses = 10;
// 5 global batches of 60 and a last one of 37 per epoch: 37 is divisible by none of 2, 3, 4, 8,
// and 60 is not divisible by 8. Five epochs give 30 steps.
constexpr int64_t kExamples = 5 * 60 + 37, kGlobalBatch = 60;
constexpr int kEpochs = 5;

using Data = lockstep::testing::ClassificationData;

Data random_data(int64_t n, uint64_t seed) {
  return lockstep::testing::random_classification(n, kInputs, kClasses, seed);
}

// Glorot-uniform-like kernels and small non-zero biases, from a fixed seed, in model.weights()
// order: dense/kernel, dense/bias, dense_1/kernel, dense_1/bias.
std::vector<Tensor> initial_weights(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](Shape shape, float limit) {
    return lockstep::testing::uniform_tensor(rng, shape, limit);
  };
  return {uniform({kInputs, kHidden}, std::sqrt(6.0f / (kInputs + kHidden))),
          uniform({kHidden}, 0.05f),
          uniform({kHidden, kClasses}, std::sqrt(6.0f / (kHidden + kClasses))),
          uniform({kClasses}, 0.05f)};
}

Sequential seed_mlp() {
  return Sequential({
      Input({kInputs}),
      layers::Dense({.units = kHidden, .activation = "relu"}),
      layers::Dense({.units = kClasses, .activation = "softmax"}),
  });
}

std::vector<Tensor> values_of(const std::vector<Variable>& vars) {
  std::vector<Tensor> out;
  for (const Variable& v : vars) out.push_back(v.raw_value().clone());
  return out;
}

// Builds the seed MLP in `strategy`'s scope with `init` as its weights, fits it with Adam for
// kEpochs over `ds` and returns the final weights.
std::vector<Tensor> fit_from(distribute::Strategy& strategy, const std::vector<Tensor>& init,
                             const Dataset& ds) {
  auto scope = strategy.scope();
  Sequential model = seed_mlp();
  std::vector<Variable> ws = model.weights();
  EXPECT_EQ(ws.size(), init.size());
  for (size_t i = 0; i < ws.size(); ++i) ws[i].assign(init[i]);
  model.compile({.optimizer = optimizers::Adam(), .loss = losses::CategoricalCrossentropy()});
  callbacks::History h = model.fit(ds, {.epochs = kEpochs, .verbose = 0});
  EXPECT_EQ(model.optimizer().iterations(), kEpochs * 6);
  return values_of(ws);
}

struct Difference {
  double max_abs = 0;  // max |a - b|
  double max_rel = 0;  // max |a - b| / max(|b|, floor)
};

// Elementwise relative difference with a floor on the denominator, so weights that pass near 0
// (|w| < floor) are compared absolutely at floor * tolerance.
Difference difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b,
                      double floor = 1e-2) {
  Difference d;
  for (size_t t = 0; t < a.size(); ++t) {
    const float* pa = a[t].data<float>();
    const float* pb = b[t].data<float>();
    for (int64_t i = 0; i < a[t].num_elements(); ++i) {
      double diff = std::abs(static_cast<double>(pa[i]) - pb[i]);
      d.max_abs = std::max(d.max_abs, diff);
      d.max_rel = std::max(d.max_rel, diff / std::max(std::abs(static_cast<double>(pb[i])), floor));
    }
  }
  return d;
}

// What re-associating the gradient sums can move a weight by, relative to the 1e-2 floor of
// `difference`, after `updates` Adam updates at lr 1e-3.
// bound: updates × lr × ρ / floor, where ρ bounds the change of Adam's normalized step
// m̂/(√v̂+ε) when each gradient element — a sum of K = 60 per-example terms (one global batch) —
// is summed in another association (per replica, then across replicas in replica order):
// |Δg| ≤ 2·K·u·Σ|terms| with u = 2^-24, and the step moves by |Δg|/√v̂ ≤ 2·K·u·κ, where κ is
// Σ|terms| over the element's root-mean-square gradient. κ ≤ 1e4 is the conditioning this test
// allows (random labels make many elements' per-example terms cancel); the oneDNN kernels of
// every ISA (SSE4.1 to AMX) block the sums differently, so no tighter figure holds on every CPU.
// 30 updates: 30 × 1e-3 × 2 × 60 × 2^-24 × 1e4 / 1e-2 = 0.21, i.e. 2.1e-3 absolute at the floor:
// a loose check (Adam moves a weight by at most about lr a step, 0.03 in 30 steps), because
// Adam's step is nearly sign(g) where |g| is small, so an element whose terms almost cancel can
// turn a rounding into a whole step; the measured differences are orders of magnitude smaller.
constexpr double kReassociationBound(int updates) {
  return updates * 1e-3 * 2 * 60 * 0x1p-24 * 1e4 / 1e-2;
}

class ReplicaEquivalence : public ::testing::TestWithParam<int> {};

TEST_P(ReplicaEquivalence, AdamStepsOnUnevenGlobalBatchesMatchOneReplica) {
  const int n = GetParam();
  Data data = random_data(kExamples, 7);
  Dataset ds = Dataset::from_tensor_slices({data.x, data.y}).batch(kGlobalBatch);
  ASSERT_EQ(ds.cardinality(), 6);
  std::vector<Tensor> init = initial_weights(11);

  distribute::MirroredStrategy one(1);
  std::vector<Tensor> expected = fit_from(one, init, ds);
  distribute::MirroredStrategy many(n);
  ASSERT_EQ(many.num_replicas_in_sync(), n);
  std::vector<Tensor> got = fit_from(many, init, ds);

  ASSERT_EQ(got.size(), expected.size());
  // The weights moved: the comparison is not between two copies of the initial weights.
  EXPECT_GT(difference(expected, init).max_abs, 1e-3);
  Difference d = difference(got, expected);
  RecordProperty("max_abs_difference", std::to_string(d.max_abs));
  RecordProperty("max_rel_difference", std::to_string(d.max_rel));
  std::printf("[ replicas=%d ] max |diff| %.3g, max relative %.3g\n", n, d.max_abs, d.max_rel);
  EXPECT_LE(d.max_rel, kReassociationBound(kEpochs * 6))
      << n << " replicas vs 1 (max |diff| " << d.max_abs << ")";
}

// The bound has teeth: a training that misses one example of every global batch — what a
// replica that dropped the last row of its slice would train — lands outside it.
TEST(ReplicaEquivalenceBound, ATrainingMissingOneExampleABatchExceedsIt) {
  Data data = random_data(kExamples, 7);
  Dataset ds = Dataset::from_tensor_slices({data.x, data.y}).batch(kGlobalBatch);
  // The same batches with the last example of each zeroed out of the loss.
  Dataset missing =
      Dataset::from_tensor_slices(
          {data.x, lockstep::testing::without_last_example_of_each_batch(data.y, kGlobalBatch)})
          .batch(kGlobalBatch);
  std::vector<Tensor> init = initial_weights(11);
  distribute::MirroredStrategy one(1);
  std::vector<Tensor> expected = fit_from(one, init, ds);
  std::vector<Tensor> wrong = fit_from(one, init, missing);
  Difference d = difference(wrong, expected);
  std::printf("[ one example a batch missing ] max |diff| %.3g, max relative %.3g\n", d.max_abs,
              d.max_rel);
  EXPECT_GT(d.max_rel, kReassociationBound(kEpochs * 6));
}

INSTANTIATE_TEST_SUITE_P(Replicas, ReplicaEquivalence, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return std::to_string(info.param) + "Replicas"; });

TEST(ReplicaEquivalenceDefault, DefaultStrategyMatchesOneMirroredReplica) {
  Data data = random_data(kExamples, 7);
  Dataset ds = Dataset::from_tensor_slices({data.x, data.y}).batch(kGlobalBatch);
  std::vector<Tensor> init = initial_weights(11);
  distribute::MirroredStrategy one(1);
  std::vector<Tensor> expected = fit_from(one, init, ds);
  std::vector<Tensor> got = fit_from(distribute::default_strategy(), init, ds);
  // One replica either way, on the same batches: the same ops in the same order, and an update
  // that gives the same bits on any thread count — so the same bits, not merely close ones.
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].nbytes(), expected[i].nbytes());
    EXPECT_EQ(std::memcmp(got[i].raw_data(), expected[i].raw_data(), got[i].nbytes()), 0)
        << "weight " << i << " differs (max |diff| " << difference({got[i]}, {expected[i]}).max_abs
        << ")";
  }
}

// Keras 3's gradient_accumulation_steps: N replicas on global batches of 30, accumulating 2 steps
// per update (replicas communicate only on update steps), train to the weights of one replica on
// global batches of 60 (the same 60 examples per update, in the same order), with the same
// number of optimizer iterations.
TEST(GradientAccumulation, TwoAccumulatedHalfBatchesMatchOneFullBatch) {
  constexpr int64_t kN = 4 * 60;
  Data data = random_data(kN, 17);
  std::vector<Tensor> init = initial_weights(19);
  auto fit = [&](distribute::Strategy& strategy, int64_t batch, std::optional<int> accumulate) {
    auto scope = strategy.scope();
    Sequential model = seed_mlp();
    std::vector<Variable> ws = model.weights();
    for (size_t i = 0; i < ws.size(); ++i) ws[i].assign(init[i]);
    model.compile(
        {.optimizer = optimizers::Adam({.base = {.gradient_accumulation_steps = accumulate}}),
         .loss = losses::CategoricalCrossentropy()});
    model.fit(Dataset::from_tensor_slices({data.x, data.y}).batch(batch),
              {.epochs = 2, .verbose = 0});
    EXPECT_EQ(model.optimizer().iterations(), 8);  // 2 epochs x 4 updates
    return values_of(ws);
  };
  distribute::MirroredStrategy one(1);
  std::vector<Tensor> expected = fit(one, 60, std::nullopt);
  EXPECT_GT(difference(expected, init).max_abs, 1e-3);
  for (int n : {1, 2, 3}) {
    distribute::MirroredStrategy strategy(n);
    std::vector<Tensor> got = fit(strategy, 30, 2);
    Difference d = difference(got, expected);
    // The gradient is summed in another association (two half-batch sums, each split over n
    // replicas, then added) than the one-replica mean of the same 60 examples.
    // bound: kReassociationBound(8 updates) = 5.7e-2 (its derivation is above).
    EXPECT_LE(d.max_rel, kReassociationBound(8))
        << n << " replicas accumulating 2 steps (max |diff| " << d.max_abs << ")";
  }
}

TEST(GradientAccumulation, ANonPositiveCountIsRefused) {
  EXPECT_THROW(optimizers::Adam({.base = {.gradient_accumulation_steps = 0}}), InvalidArgument);
}

// Everything from the seed: initial weights from the initializers (set_random_seed) and a
// shuffled pipeline with a fixed seed. Returns the final weights' bytes.
std::vector<std::string> seeded_run(int replicas) {
  Data data = random_data(kExamples, 3);
  Dataset ds = Dataset::from_tensor_slices({data.x, data.y})
                   .shuffle(kExamples, /*seed=*/5, /*reshuffle_each_iteration=*/true)
                   .batch(kGlobalBatch);
  distribute::MirroredStrategy strategy(replicas);
  set_random_seed(1234);
  auto scope = strategy.scope();
  Sequential model = seed_mlp();
  model.compile({.optimizer = optimizers::Adam(), .loss = losses::CategoricalCrossentropy()});
  model.fit(ds, {.epochs = kEpochs, .verbose = 0});
  std::vector<std::string> bytes;
  for (const Variable& v : model.weights()) {
    const Tensor& t = v.raw_value();
    bytes.emplace_back(static_cast<const char*>(t.raw_data()), t.nbytes());
  }
  return bytes;
}

TEST(ReplicaDeterminism, TwoRunsWithTheSameSeedGiveBitIdenticalWeights) {
  for (int replicas : {1, 3, 8}) {
    std::vector<std::string> first = seeded_run(replicas);
    std::vector<std::string> second = seeded_run(replicas);
    ASSERT_EQ(first.size(), 4u);
    for (size_t i = 0; i < first.size(); ++i) {
      EXPECT_TRUE(first[i] == second[i]) << replicas << " replicas, weight " << i << " differs";
    }
  }
}

}  // namespace
}  // namespace lockstep::keras
