// fit computes the running loss and metrics after a step only when a callback reads them at
// batch end (Callback::uses_train_batch_logs): under several workers those logs are a sum across
// workers, a collective per step. The epoch logs must not depend on it, a callback that reads
// batch logs must get them after every step, and the built-in callbacks that read only epoch
// logs must say so.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <vector>

#include "lockstep/distribute/strategies.h"
#include "lockstep/keras.h"
#include "testing/classification_data.h"

namespace lockstep::keras {
namespace {

constexpr int64_t kInputs = 12, kClasses = 3, kExamples = 96, kBatch = 16;

struct FitRun {
  std::vector<double> epoch_loss, epoch_accuracy;  // what on_epoch_end saw
  std::vector<size_t> batch_log_sizes;             // how many values each batch end got
  std::vector<double> batch_loss;
};

// A small classifier, compiled, in the current strategy's scope.
std::unique_ptr<Sequential> compiled_model(uint64_t seed) {
  set_random_seed(seed);
  auto model = std::make_unique<Sequential>(
      std::vector<LayerArg>{Input({kInputs}), layers::Dense({.units = 8, .activation = "relu"}),
                            layers::Dense({.units = kClasses, .activation = "softmax"})});
  model->compile({.optimizer = optimizers::Adam(),
                  .loss = losses::CategoricalCrossentropy(),
                  .metrics = {metrics::CategoricalAccuracy()}});
  return model;
}

// Two replicas, 3 epochs of 6 steps, with `batch_reader` reading the logs at every batch end
// when set.
FitRun train(bool batch_reader, std::vector<std::shared_ptr<callbacks::Callback>> extra = {}) {
  auto data = lockstep::testing::random_classification(kExamples, kInputs, kClasses, 5);
  distribute::MirroredStrategy strategy(2);
  distribute::Strategy::Scope scope(strategy);
  std::unique_ptr<Sequential> model = compiled_model(77);
  FitRun run;
  callbacks::LambdaCallbackOptions o{.on_epoch_end = [&](int, const callbacks::Logs& logs) {
    run.epoch_loss.push_back(logs.at("loss"));
    run.epoch_accuracy.push_back(logs.at("categorical_accuracy"));
  }};
  if (batch_reader) {
    o.on_train_batch_end = [&](int64_t, const callbacks::Logs& logs) {
      run.batch_log_sizes.push_back(logs.size());
      run.batch_loss.push_back(logs.count("loss") ? logs.at("loss") : -1.0);
    };
  }
  std::vector<std::shared_ptr<callbacks::Callback>> cbs = {
      std::make_shared<callbacks::LambdaCallback>(o)};
  for (auto& c : extra) cbs.push_back(c);
  Dataset ds = Dataset::from_tensor_slices({data.x, data.y}).batch(kBatch);
  model->fit(ds, {.epochs = 3, .verbose = 0, .callbacks = cbs});
  return run;
}

// Records what its batch-end hook got, and says it does not read it.
class EpochOnly : public callbacks::Callback {
 public:
  void on_train_batch_end(int64_t, const callbacks::Logs& logs) override {
    sizes.push_back(logs.size());
  }
  bool uses_train_batch_logs() const override { return false; }
  std::vector<size_t> sizes;
};

TEST(FitBatchLogs, EpochLogsDoNotDependOnWhetherBatchLogsAreRead) {
  const FitRun without = train(false);
  const FitRun with = train(true);
  ASSERT_EQ(without.epoch_loss.size(), 3u);
  EXPECT_EQ(without.epoch_loss, with.epoch_loss);
  EXPECT_EQ(without.epoch_accuracy, with.epoch_accuracy);
  // The reader got the running loss and accuracy after every one of the 18 steps, and the last
  // running value of each epoch is the epoch's.
  ASSERT_EQ(with.batch_log_sizes.size(), 18u);
  for (size_t s : with.batch_log_sizes) EXPECT_EQ(s, 2u);
  for (size_t e = 0; e < 3; ++e) EXPECT_EQ(with.batch_loss[6 * e + 5], with.epoch_loss[e]);
  // Running means: the first step's loss differs from the epoch's.
  EXPECT_NE(with.batch_loss[0], with.epoch_loss[0]);
}

TEST(FitBatchLogs, ACallbackThatDoesNotReadThemGetsEmptyLogsUnlessAnotherReadsThem) {
  auto alone = std::make_shared<EpochOnly>();
  train(false, {alone});
  ASSERT_EQ(alone->sizes.size(), 18u);
  for (size_t s : alone->sizes) EXPECT_EQ(s, 0u);
  // Beside a reader the logs are computed anyway, and every callback gets them.
  auto beside = std::make_shared<EpochOnly>();
  train(true, {beside});
  ASSERT_EQ(beside->sizes.size(), 18u);
  for (size_t s : beside->sizes) EXPECT_EQ(s, 2u);
}

// evaluate computes its running logs after a step only when it was given callbacks.
TEST(FitBatchLogs, EvaluateGivesTheSameResultsWithOrWithoutBatchLogs) {
  auto data = lockstep::testing::random_classification(kExamples, kInputs, kClasses, 9);
  distribute::MirroredStrategy strategy(2);
  distribute::Strategy::Scope scope(strategy);
  std::unique_ptr<Sequential> model = compiled_model(78);
  Dataset ds = Dataset::from_tensor_slices({data.x, data.y}).batch(kBatch);
  const auto plain = model->evaluate(ds, {.verbose = 0});
  std::vector<callbacks::Logs> seen;
  struct TestBatches : callbacks::Callback {
    explicit TestBatches(std::vector<callbacks::Logs>* out) : out_(out) {}
    void on_test_batch_end(int64_t, const callbacks::Logs& logs) override { out_->push_back(logs); }
    std::vector<callbacks::Logs>* out_;
  };
  const auto with =
      model->evaluate(ds, {.verbose = 0, .callbacks = {std::make_shared<TestBatches>(&seen)}});
  EXPECT_EQ(plain, with);
  ASSERT_EQ(seen.size(), 6u);
  EXPECT_EQ(seen.back().at("loss"), with.at("loss"));
  EXPECT_EQ(seen.back().at("categorical_accuracy"), with.at("categorical_accuracy"));
}

TEST(FitBatchLogs, BuiltInCallbacksSayWhetherTheyReadBatchLogs) {
  // Unknown callbacks are assumed to read them.
  struct Custom : callbacks::Callback {};
  EXPECT_TRUE(Custom().uses_train_batch_logs());
  EXPECT_TRUE(callbacks::TerminateOnNaN().uses_train_batch_logs());
  EXPECT_FALSE(callbacks::History().uses_train_batch_logs());
  EXPECT_FALSE(callbacks::EarlyStopping().uses_train_batch_logs());
  EXPECT_FALSE(callbacks::LambdaCallback({.on_epoch_end = [](int, const callbacks::Logs&) {
               }}).uses_train_batch_logs());
  EXPECT_TRUE(callbacks::LambdaCallback({.on_train_batch_end = [](int64_t, const callbacks::Logs&) {
              }}).uses_train_batch_logs());
  // The progress bar reads them only when it redraws a live bar.
  std::ostringstream out;
  EXPECT_TRUE(
      callbacks::ProgbarLogger({.verbose = 1, .out = &out, .clock = {}, .interactive = true})
          .uses_train_batch_logs());
  EXPECT_FALSE(
      callbacks::ProgbarLogger({.verbose = 1, .out = &out, .clock = {}, .interactive = false})
          .uses_train_batch_logs());
  EXPECT_FALSE(
      callbacks::ProgbarLogger({.verbose = 2, .out = &out, .clock = {}, .interactive = true})
          .uses_train_batch_logs());
  callbacks::CallbackList list({std::make_shared<callbacks::History>()});
  EXPECT_FALSE(list.uses_train_batch_logs());
  list.append(std::make_shared<callbacks::TerminateOnNaN>());
  EXPECT_TRUE(list.uses_train_batch_logs());
}

}  // namespace
}  // namespace lockstep::keras
