// Model::train_step is overridable as in Keras 3: fit calls the subclass's step for every batch,
// reports the logs it returns, and the weights change as the override says, not as the
// compiled optimizer would.
#include <gtest/gtest.h>

#include <vector>

#include "lockstep/distribute/strategies.h"
#include "lockstep/keras.h"

namespace lockstep::keras {
namespace {

constexpr int64_t kExamples = 10, kBatch = 4;

// Adds 1 to every trainable weight per step, whatever the data, and returns its own logs.
class AddOneModel : public Model {
 public:
  using Model::Model;
  std::vector<int64_t> batch_sizes;

  callbacks::Logs train_step(const distribute::PerReplica<Element>& data) override {
    batch_sizes.push_back(data[0][0].dim(0));
    for (const Variable& v : trainable_weights()) {
      float* w = v.raw_value().data<float>();
      for (int64_t i = 0; i < v.num_elements(); ++i) w[i] += 1.0f;
    }
    return {{"loss", 100.0 + static_cast<double>(batch_sizes.size())}};
  }
};

// Keras' super().train_step(data): an override that counts its calls and runs the default step.
class CountingModel : public Model {
 public:
  using Model::Model;
  int calls = 0;

  callbacks::Logs train_step(const distribute::PerReplica<Element>& data) override {
    ++calls;
    return Model::train_step(data);
  }
};

template <typename M>
M compiled_model() {
  set_random_seed(3);
  KerasTensor inputs = Input({2});
  KerasTensor outputs = layers::Dense({.units = 1})(inputs);
  M model(inputs, outputs);
  model.compile({.optimizer = optimizers::SGD({.learning_rate = 0.1}), .loss = "mse"});
  return model;
}

Tensor ones(Shape shape) {
  return Tensor::full(std::move(shape), 1.0);
}

TEST(TrainStepOverride, FitCallsTheOverrideForEveryBatchAndReportsItsLogs) {
  AddOneModel model = compiled_model<AddOneModel>();
  model.predict(ones({1, 2}));  // builds the weights
  std::vector<Tensor> before = model.get_weights();
  callbacks::History history = model.fit(ones({kExamples, 2}), ones({kExamples, 1}),
                                         {.epochs = 2, .verbose = 0, .batch_size = kBatch});
  EXPECT_EQ(model.batch_sizes, (std::vector<int64_t>{4, 4, 2, 4, 4, 2}));
  // Six steps of +1 each; the compiled optimizer never ran.
  std::vector<Tensor> after = model.get_weights();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    for (int64_t j = 0; j < after[i].num_elements(); ++j) {
      EXPECT_EQ(after[i].data<float>()[j], before[i].data<float>()[j] + 6.0f) << i << "/" << j;
    }
  }
  EXPECT_EQ(model.optimizer().iterations(), 0);
  // Each epoch reports the logs of its last step.
  EXPECT_EQ(history.history.at("loss"), (std::vector<double>{103.0, 106.0}));
}

TEST(TrainStepOverride, AnOverrideCanRunTheDefaultStep) {
  distribute::MirroredStrategy strategy(2);
  distribute::Strategy::Scope scope(strategy);
  CountingModel model = compiled_model<CountingModel>();
  callbacks::History history = model.fit(ones({kExamples, 2}), ones({kExamples, 1}),
                                         {.epochs = 2, .verbose = 0, .batch_size = kBatch});
  EXPECT_EQ(model.calls, 6);
  EXPECT_EQ(model.optimizer().iterations(), 6);
  ASSERT_EQ(history.history.at("loss").size(), 2u);
  EXPECT_LT(history.history.at("loss")[1], history.history.at("loss")[0]);
}

}  // namespace
}  // namespace lockstep::keras
