#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "lockstep/core/error.h"
#include "lockstep/keras/callbacks.h"
#include "lockstep/keras/optimizers/sgd.h"

namespace lockstep::keras::callbacks {
namespace {

// A fake clock: each call returns the current value; tests advance it.
struct FakeClock {
  double now = 100.0;
  std::function<double()> fn() {
    return [this] { return now; };
  }
};

TEST(ProgbarLogger, NonTerminalPrintsOneKerasLinePerEpoch) {
  std::ostringstream out;
  FakeClock clock;
  ProgbarLogger bar({.verbose = 1, .out = &out, .clock = clock.fn(), .interactive = false});
  bar.set_params({{"epochs", 5}, {"steps", 469}});
  bar.on_epoch_begin(0, {});
  clock.now += 0.2;  // the first step, with one-time setup, is excluded from the step time
  bar.on_train_batch_end(0, {{"loss", 0.9}});
  for (int64_t b = 1; b < 469; ++b) {
    clock.now += 0.004;
    bar.on_train_batch_end(b, {{"loss", 0.6}});
  }
  bar.on_epoch_end(0, {{"loss", 0.51234}, {"categorical_accuracy", 0.82104}});
  EXPECT_EQ(out.str(),
            "Epoch 1/5\n"
            "469/469 [==============================] - 2s 4ms/step - loss: 0.5123 - "
            "categorical_accuracy: 0.8210\n");
}

TEST(ProgbarLogger, PutsValidationAfterTrainingAndUsesExponentForTinyValues) {
  std::ostringstream out;
  FakeClock clock;
  ProgbarLogger bar({.verbose = 1, .out = &out, .clock = clock.fn(), .interactive = false});
  bar.set_params({{"epochs", 1}, {"steps", 10}});
  bar.on_epoch_begin(0, {});
  for (int64_t b = 0; b < 10; ++b) {
    clock.now += 1.5;
    bar.on_train_batch_end(b, {});
  }
  bar.on_epoch_end(0, {{"val_loss", 0.25}, {"loss", 0.0001}, {"acc", 0.5}, {"val_acc", 0.75}});
  // One epoch: no "Epoch 1/1" line (as Keras).
  EXPECT_EQ(out.str(),
            "10/10 [==============================] - 15s 2s/step - loss: 1.0000e-04 - acc: "
            "0.5000 - val_loss: 0.2500 - val_acc: 0.7500\n");
}

TEST(ProgbarLogger, TerminalRedrawsInPlaceWithAnEta) {
  std::ostringstream out;
  FakeClock clock;
  ProgbarLogger bar({.verbose = 1, .out = &out, .clock = clock.fn(), .interactive = true});
  bar.set_params({{"epochs", 2}, {"steps", 4}});
  bar.on_epoch_begin(1, {});
  clock.now += 1.0;
  bar.on_train_batch_end(0, {{"loss", 2.0}});
  clock.now += 1.0;
  bar.on_train_batch_end(1, {{"loss", 1.5}});
  clock.now += 1.0;
  bar.on_train_batch_end(2, {{"loss", 1.25}});
  clock.now += 1.0;
  bar.on_train_batch_end(3, {{"loss", 1.0}});
  bar.on_epoch_end(1, {{"loss", 1.0}});
  EXPECT_EQ(out.str(),
            "Epoch 2/2\n"
            "\r1/4 [======>.......................] - ETA: 3s - loss: 2.0000"
            "\r2/4 [==============>...............] - ETA: 2s - loss: 1.5000"
            "\r3/4 [=====================>........] - ETA: 1s - loss: 1.2500"
            "\r4/4 [==============================] - 4s 1s/step - loss: 1.0000\n");
}

TEST(ProgbarLogger, VerboseTwoPrintsTheShortEpochLine) {
  std::ostringstream out;
  FakeClock clock;
  ProgbarLogger bar({.verbose = 2, .out = &out, .clock = clock.fn(), .interactive = true});
  bar.set_params({{"epochs", 3}, {"steps", 100}});
  bar.on_epoch_begin(2, {});
  for (int64_t b = 0; b < 100; ++b) {
    clock.now += 0.02;
    bar.on_train_batch_end(b, {{"loss", 1.0}});
  }
  bar.on_epoch_end(2, {{"loss", 0.5}});
  EXPECT_EQ(out.str(), "Epoch 3/3\n100/100 - 2s - loss: 0.5000 - 2s/epoch - 20ms/step\n");
}

TEST(History, RecordsEveryEpochsLogs) {
  History h;
  CallbackList list({std::shared_ptr<Callback>(&h, [](Callback*) {})});
  list.on_train_begin({});
  list.on_epoch_end(0, {{"loss", 1.0}, {"accuracy", 0.5}});
  list.on_epoch_end(1, {{"loss", 0.5}, {"accuracy", 0.75}});
  EXPECT_EQ(h.epoch, (std::vector<int>{0, 1}));
  EXPECT_EQ(h.history["loss"], (std::vector<double>{1.0, 0.5}));
  EXPECT_EQ(h.history["accuracy"], (std::vector<double>{0.5, 0.75}));
}

struct Flag {
  bool stop = false;
  TrainingTarget target() {
    return {.stop_training = [this] { stop = true; }};
  }
};

TEST(EarlyStopping, StopsAfterPatienceEpochsWithoutImprovement) {
  Flag flag;
  EarlyStopping es({.monitor = "val_loss", .patience = 2});
  es.set_target(flag.target());
  es.on_train_begin({});
  const double losses[] = {1.0, 0.8, 0.85, 0.81};
  for (int e = 0; e < 4; ++e) {
    es.on_epoch_end(e, {{"val_loss", losses[e]}});
    EXPECT_EQ(flag.stop, e == 3) << "epoch " << e;
  }
  EXPECT_EQ(es.stopped_epoch(), 3);
  EXPECT_EQ(es.best_epoch(), 1);
  EXPECT_EQ(es.best(), 0.8);
}

TEST(EarlyStopping, MinDeltaAndAutoModeForAccuracy) {
  Flag flag;
  EarlyStopping es({.monitor = "val_accuracy", .min_delta = 0.01, .patience = 1});
  es.set_target(flag.target());
  es.on_train_begin({});
  es.on_epoch_end(0, {{"val_accuracy", 0.5}});
  es.on_epoch_end(1, {{"val_accuracy", 0.505}});  // rises by less than min_delta
  EXPECT_TRUE(flag.stop);
  EXPECT_EQ(es.best(), 0.5);
}

TEST(EarlyStopping, RestoresTheBestWeights) {
  Flag flag;
  Variable w(Tensor::full({2}, 0.0), "w");
  TrainingTarget t = flag.target();
  t.weights = [&] { return std::vector<Variable>{w}; };
  EarlyStopping es({.monitor = "loss", .patience = 1, .restore_best_weights = true});
  es.set_target(t);
  es.on_train_begin({});
  const double losses[] = {3.0, 1.0, 2.0};
  for (int e = 0; e < 3; ++e) {
    w.assign(Tensor::full({2}, e + 1.0));  // the weights at the end of epoch e
    es.on_epoch_end(e, {{"loss", losses[e]}});
  }
  EXPECT_TRUE(flag.stop);
  EXPECT_EQ(w.raw_value().to_vector<float>(), (std::vector<float>{2.0f, 2.0f}));
}

TEST(EarlyStopping, UnboundTargetIsAClearError) {
  EarlyStopping es({.monitor = "loss"});
  es.on_train_begin({});
  es.on_epoch_end(0, {{"loss", 1.0}});
  EXPECT_THROW(es.on_epoch_end(1, {{"loss", 2.0}}), FailedPrecondition);
}

TEST(TerminateOnNaN, StopsOnNaNOrInfiniteLoss) {
  Flag flag;
  std::ostringstream out;
  TerminateOnNaN t(&out);
  t.set_target(flag.target());
  t.on_train_batch_end(0, {{"loss", 1.0}});
  EXPECT_FALSE(flag.stop);
  t.on_train_batch_end(7, {{"loss", std::numeric_limits<double>::quiet_NaN()}});
  EXPECT_TRUE(flag.stop);
  EXPECT_EQ(out.str(), "Batch 7: Invalid loss, terminating training\n");
  Flag inf;
  t.set_target(inf.target());
  t.on_train_batch_end(1, {{"loss", std::numeric_limits<double>::infinity()}});
  EXPECT_TRUE(inf.stop);
}

TEST(LearningRateScheduler, SetsTheOptimizerRateAtEachEpochStart) {
  optimizers::SGD sgd({.learning_rate = 0.1});
  LearningRateScheduler s([](int epoch, double lr) { return epoch < 2 ? lr : lr * 0.5; });
  s.set_target({.optimizer = [&]() -> optimizers::Optimizer& { return sgd; }});
  s.on_epoch_begin(0, {});
  EXPECT_DOUBLE_EQ(sgd.learning_rate(), 0.1);
  s.on_epoch_begin(1, {});
  s.on_epoch_begin(2, {});
  EXPECT_DOUBLE_EQ(sgd.learning_rate(), 0.05);
  s.on_epoch_begin(3, {});
  EXPECT_DOUBLE_EQ(sgd.learning_rate(), 0.025);
}

class CallbackFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("lockstep_callbacks_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string read(const std::string& p) {
    std::ifstream f(p);
    return {std::istreambuf_iterator<char>(f), {}};
  }
  std::filesystem::path dir_;
};

TEST_F(CallbackFiles, CSVLoggerWritesSortedColumnsAndAppends) {
  const std::string p = (dir_ / "log.csv").string();
  {
    CSVLogger log(p);
    log.on_train_begin({});
    log.on_epoch_end(0, {{"loss", 0.5}, {"accuracy", 0.1}});
    log.on_epoch_end(1, {{"loss", 1e-05}});
    log.on_train_end({});
  }
  EXPECT_EQ(read(p), "epoch,accuracy,loss\n0,0.1,0.5\n1,NA,1e-05\n");
  CSVLogger more(p, ';', /*append=*/true);
  more.on_train_begin({});
  more.on_epoch_end(2, {{"loss", 2.0}, {"accuracy", 0.25}});
  more.on_train_end({});
  EXPECT_EQ(read(p), "epoch,accuracy,loss\n0,0.1,0.5\n1,NA,1e-05\n2;0.25;2.0\n");
}

TEST(CSVLogger, FormatsNumbersAsPythonRepr) {
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(2.0), "2.0");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(1e-05), "1e-05");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(123456.789), "123456.789");
  EXPECT_EQ(python_float_repr(-0.5), "-0.5");
  EXPECT_EQ(python_float_repr(std::nan("")), "nan");
}

TEST(ModelCheckpoint, FormatsThePathFromEpochAndLogs) {
  ModelCheckpoint c("ckpt/w.{epoch:02d}-{val_loss:.2f}.safetensors", {.save_weights_only = true});
  EXPECT_EQ(c.format_path(4, {{"val_loss", 0.12345}}), "ckpt/w.05-0.12.safetensors");
  EXPECT_THROW(c.format_path(0, {}), InvalidArgument);
}

TEST(ModelCheckpoint, SavesOnlyImprovementsWithSaveBestOnly) {
  std::vector<std::string> saved;
  ModelCheckpoint c("w{epoch}.safetensors",
                    {.monitor = "val_loss", .save_best_only = true, .save_weights_only = true});
  c.set_target({.save_weights = [&](const std::string& p) { saved.push_back(p); }});
  c.on_epoch_end(0, {{"val_loss", 1.0}});
  c.on_epoch_end(1, {{"val_loss", 2.0}});
  c.on_epoch_end(2, {{"val_loss", 0.5}});
  EXPECT_EQ(saved, (std::vector<std::string>{"w1.safetensors", "w3.safetensors"}));
}

TEST(LambdaCallback, CallsTheGivenFunctions) {
  std::vector<int> epochs;
  LambdaCallback cb({.on_epoch_end = [&](int e, const Logs&) { epochs.push_back(e); }});
  CallbackList list;
  list.append(std::shared_ptr<Callback>(&cb, [](Callback*) {}));
  list.on_epoch_begin(0, {});
  list.on_epoch_end(0, {});
  list.on_epoch_end(1, {});
  EXPECT_EQ(epochs, (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace lockstep::keras::callbacks
