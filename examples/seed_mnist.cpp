// The seed program (the TensorFlow tutorial that Lockstep's API follows; the README shows it),
// line for line: detect the accelerator (or fall back to the default strategy), build the input
// pipeline, create and compile the model inside the strategy's scope, and fit.
#include <iostream>
#include <memory>
#include <string>

#include "lockstep/lockstep.h"

using namespace lockstep;
using namespace lockstep::keras;

// uint8 images [B, 28, 28] and labels [B] -> float32 [B, 784] in [0, 1] and one-hot [B, 10].
Element preprocess(const Element& batch) {
  Tensor x = batch[0].to(DType::float32).reshape({-1, 784});
  float* d = x.data<float>();
  for (int64_t i = 0; i < x.num_elements(); ++i) d[i] *= 1.0f / 255.0f;
  return {x, one_hot(batch[1].to(DType::int64), 10)};
}

// Optional: `seed_mnist --precision mixed_bfloat16` (Keras: mixed_precision.set_global_policy).
int main(int argc, char** argv) try {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--precision") mixed_precision::set_global_policy(argv[i + 1]);
  }
  std::unique_ptr<distribute::Strategy> tpu_strategy;
  distribute::Strategy* strategy;
  try {
    AcceleratorClusterResolver tpu;  // detect the accelerator
    connect_to_cluster(tpu);
    initialize_system(tpu);
    tpu_strategy = std::make_unique<distribute::AcceleratorStrategy>(tpu);
    strategy = tpu_strategy.get();
  } catch (const NotFound&) {                // none found
    strategy = &distribute::get_strategy();  // default: one device
  }
  std::cout << strategy->num_replicas_in_sync() << "\n";
  const int64_t GLOBAL_BATCH = 128 * strategy->num_replicas_in_sync();

  auto [train, test] = datasets::fashion_mnist::load_data();
  auto [x_train, y_train] = train;
  Dataset dataset = Dataset::from_tensor_slices({x_train, y_train})
                        .shuffle(60000, /*seed=*/1)
                        .repeat()
                        .batch(GLOBAL_BATCH)  // batch BEFORE distributing
                        .map(preprocess);
  dataset = dataset.prefetch(Dataset::AUTOTUNE);

  auto scope = strategy->scope();  // model + optimizer inside scope
  Sequential model({
      Input({784}),
      layers::Dense({.units = 128, .activation = "relu"}),
      layers::Dense({.units = 10, .activation = "softmax"}),
  });
  model.compile({.optimizer = optimizers::Adam(),
                 .loss = losses::CategoricalCrossentropy(),
                 .metrics = {metrics::CategoricalAccuracy()}});
  auto history = model.fit(dataset, {.epochs = 5, .steps_per_epoch = 60000 / GLOBAL_BATCH});

  auto [x_test, y_test] = test;
  auto results = model.evaluate(
      Dataset::from_tensor_slices({x_test, y_test}).batch(GLOBAL_BATCH).map(preprocess));
  std::cout << "test loss: " << results["loss"]
            << " - test accuracy: " << results["categorical_accuracy"] << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "seed_mnist: " << e.what() << "\n";
  return 1;
}
