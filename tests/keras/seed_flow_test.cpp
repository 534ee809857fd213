// The seed program's flow end to end on a synthetic, separable data set (not Fashion-MNIST):
// uint8 images and labels -> batch -> map(preprocess) -> a model compiled and fitted inside a
// MirroredStrategy's scope -> evaluate; and fit's callback list (History, EarlyStopping,
// TerminateOnNaN) wired to the model.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "lockstep/autodiff/functions.h"
#include "lockstep/distribute/strategies.h"
#include "lockstep/keras.h"

namespace lockstep::keras {
namespace {

// As examples/seed_mnist.cpp: uint8 [B, 28, 28], uint8 [B] -> float32 [B, 784] in [0, 1], one-hot.
Element preprocess(const Element& batch) {
  Tensor x = batch[0].to(DType::float32).reshape({-1, 784});
  float* d = x.data<float>();
  for (int64_t i = 0; i < x.num_elements(); ++i) d[i] *= 1.0f / 255.0f;
  return {x, one_hot(batch[1].to(DType::int64), 10)};
}

// n noisy images; class c brightens rows [2c + 4, 2c + 6) of the 28 × 28 image.
struct Images {
  Tensor x, y;
};
Images separable_images(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> noise(0, 100), label(0, 9);
  Tensor x({n, 28, 28}, DType::uint8), y({n}, DType::uint8);
  uint8_t* px = x.data<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    int c = label(rng);
    y.data<uint8_t>()[i] = static_cast<uint8_t>(c);
    for (int64_t r = 0; r < 28; ++r) {
      for (int64_t col = 0; col < 28; ++col) {
        int v = noise(rng) + (r >= 2 * c + 4 && r < 2 * c + 6 ? 150 : 0);
        px[(i * 28 + r) * 28 + col] = static_cast<uint8_t>(v);
      }
    }
  }
  return {x, y};
}

Sequential seed_model() {
  return Sequential({
      Input({784}),
      layers::Dense({.units = 128, .activation = "relu"}),
      layers::Dense({.units = 10, .activation = "softmax"}),
  });
}

TEST(SeedFlow, TwoReplicasLearnASeparableDataSetToHighAccuracy) {
  distribute::MirroredStrategy strategy(2);
  const int64_t global_batch = 32 * strategy.num_replicas_in_sync();
  auto [x_train, y_train] = separable_images(2000, 1);
  auto [x_test, y_test] = separable_images(500, 2);
  Dataset dataset = Dataset::from_tensor_slices({x_train, y_train})
                        .shuffle(2000, /*seed=*/1)
                        .repeat()
                        .batch(global_batch)
                        .map(preprocess)
                        .prefetch(Dataset::AUTOTUNE);

  set_random_seed(0);
  auto scope = strategy.scope();
  Sequential model = seed_model();
  model.compile({.optimizer = optimizers::Adam(),
                 .loss = losses::CategoricalCrossentropy(),
                 .metrics = {metrics::CategoricalAccuracy()}});
  callbacks::History history =
      model.fit(dataset, {.epochs = 3, .steps_per_epoch = 2000 / global_batch, .verbose = 0});
  ASSERT_EQ(history.history.at("loss").size(), 3u);
  EXPECT_LT(history.history.at("loss")[2], history.history.at("loss")[0]);

  auto results = model.evaluate(
      Dataset::from_tensor_slices({x_test, y_test}).batch(global_batch).map(preprocess));
  EXPECT_GT(results.at("categorical_accuracy"), 0.95);
  EXPECT_LT(results.at("loss"), 0.3);
}

TEST(SeedFlow, HistoryHasOneEntryPerEpochWithLossAndTheMetric) {
  distribute::MirroredStrategy strategy(2);
  auto [x, y] = separable_images(256, 3);
  Dataset ds = Dataset::from_tensor_slices({x, y}).batch(64).map(preprocess);
  auto scope = strategy.scope();
  Sequential model = seed_model();
  model.compile({.optimizer = optimizers::Adam(),
                 .loss = losses::CategoricalCrossentropy(),
                 .metrics = {metrics::CategoricalAccuracy()}});
  auto extra = std::make_shared<callbacks::History>();
  callbacks::History h = model.fit(ds, {.epochs = 3, .verbose = 0, .callbacks = {extra}});
  for (const callbacks::History* hist : {&h, extra.get()}) {
    EXPECT_EQ(hist->epoch, (std::vector<int>{0, 1, 2}));
    ASSERT_TRUE(hist->history.count("loss"));
    ASSERT_TRUE(hist->history.count("categorical_accuracy"));
    EXPECT_EQ(hist->history.at("loss").size(), 3u);
    EXPECT_EQ(hist->history.at("categorical_accuracy").size(), 3u);
  }
}

TEST(SeedFlow, EarlyStoppingEndsFitWhenTheMonitorStopsImproving) {
  distribute::MirroredStrategy strategy(2);
  auto [x, y] = separable_images(256, 4);
  Dataset ds = Dataset::from_tensor_slices({x, y}).batch(64).map(preprocess);
  auto scope = strategy.scope();
  Sequential model = seed_model();
  model.compile({.optimizer = optimizers::Adam(),
                 .loss = losses::CategoricalCrossentropy(),
                 .metrics = {metrics::CategoricalAccuracy()}});
  // No epoch can improve the loss by 10: fit stops after epoch 2 (index 1) with patience 1.
  auto early = std::make_shared<callbacks::EarlyStopping>(
      callbacks::EarlyStoppingOptions{.monitor = "loss", .min_delta = 10.0, .patience = 1});
  callbacks::History h =
      model.fit(ds, {.epochs = 10,
                     .verbose = 0,
                     .callbacks = {early, std::make_shared<callbacks::TerminateOnNaN>()}});
  EXPECT_EQ(h.epoch, (std::vector<int>{0, 1}));
  EXPECT_EQ(h.history.at("loss").size(), 2u);
  EXPECT_EQ(early->stopped_epoch(), 1);
  EXPECT_EQ(model.optimizer().iterations(), 2 * 4);
}

// 128 examples in batches of 32; example 40 (in batch 1) carries a NaN, in its label or its
// first pixel.
Dataset with_a_nan(bool in_label) {
  const int64_t n = 128;
  std::vector<float> x(static_cast<size_t>(n * 784), 0.5f), y(static_cast<size_t>(n * 10), 0.0f);
  for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i * 10 + i % 10)] = 1.0f;
  float nan = std::numeric_limits<float>::quiet_NaN();
  (in_label ? y[40 * 10 + 0] : x[40 * 784]) = nan;
  return Dataset::from_tensor_slices(
             {Tensor::from_vector(x, {n, 784}), Tensor::from_vector(y, {n, 10})})
      .batch(32);
}

TEST(SeedFlow, TerminateOnNanStopsFitAfterTheFirstNanBatch) {
  distribute::MirroredStrategy strategy(2);
  auto scope = strategy.scope();
  Sequential model = seed_model();
  model.compile({.optimizer = optimizers::SGD(), .loss = losses::CategoricalCrossentropy()});
  std::ostringstream out;
  callbacks::History h =
      model.fit(with_a_nan(/*in_label=*/true),
                {.epochs = 5,
                 .verbose = 0,
                 .callbacks = {std::make_shared<callbacks::TerminateOnNaN>(&out)}});
  EXPECT_THAT(out.str(), ::testing::HasSubstr("Batch 1: Invalid loss, terminating training"));
  EXPECT_EQ(model.optimizer().iterations(), 2);
  ASSERT_EQ(h.history.at("loss").size(), 1u);
  EXPECT_TRUE(std::isnan(h.history.at("loss")[0]));
}

// DISABLED: a known bug in the ops layer. Dense's fused relu (oneDNN eltwise_relu, alpha 0, whose
// x86 JIT uses max(x, 0)) maps NaN to 0, where TensorFlow, PyTorch and JAX give NaN. A NaN input
// then poisons the first kernel through its gradient (x * 0 = NaN) while every later output is a
// finite constant (all hidden units read 0), so the loss stays finite (~log 10) and TerminateOnNaN
// never fires: training silently dies. Enable once relu propagates NaN.
TEST(SeedFlow, NanInputReachesTheLossThroughRelu) {
  distribute::MirroredStrategy strategy(2);
  auto scope = strategy.scope();
  Sequential model = seed_model();
  model.compile({.optimizer = optimizers::SGD(), .loss = losses::CategoricalCrossentropy()});
  std::vector<float> row(784, 0.5f);
  row[0] = std::numeric_limits<float>::quiet_NaN();
  Tensor p = model.predict(Tensor::from_vector(row, {1, 784}));
  EXPECT_TRUE(std::isnan(p.at(0))) << p.to_string();
  std::ostringstream out;
  model.fit(with_a_nan(/*in_label=*/false),
            {.epochs = 5,
             .verbose = 0,
             .callbacks = {std::make_shared<callbacks::TerminateOnNaN>(&out)}});
  EXPECT_THAT(out.str(), ::testing::HasSubstr("Batch 1: Invalid loss, terminating training"));
}

}  // namespace
}  // namespace lockstep::keras
