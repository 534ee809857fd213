// A program outside the Lockstep tree, built against an installed (or fetched) Lockstep: the seed
// program, kept small. It trains the 784-128-10 model for one epoch on the first 12,000
// Fashion-MNIST images (a synthetic, learnable stand-in when the dataset is not installed),
// evaluates it on 2,000 test images, and fails unless the model learned: accuracy must be well
// above the 10% of guessing.
#include <cstdio>
#include <memory>
#include <random>

#include "lockstep/lockstep.h"

using namespace lockstep;
using namespace lockstep::keras;

namespace {

// uint8 images [B, 28, 28] and labels [B] -> float32 [B, 784] in [0, 1] and one-hot [B, 10].
Element preprocess(const Element& batch) {
  Tensor x = batch[0].to(DType::float32).reshape({-1, 784});
  float* d = x.data<float>();
  for (int64_t i = 0; i < x.num_elements(); ++i) d[i] *= 1.0f / 255.0f;
  return {x, one_hot(batch[1].to(DType::int64), 10)};
}

// n random "images" whose label is the brightest of 10 pixel bands.
datasets::Split synthetic_split(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pixel(0, 120), label(0, 9);
  Tensor x({n, 28, 28}, DType::uint8), y({n}, DType::uint8);
  for (int64_t i = 0; i < n; ++i) {
    const int c = label(rng);
    y.data<uint8_t>()[i] = static_cast<uint8_t>(c);
    for (int64_t j = 0; j < 784; ++j) {
      x.data<uint8_t>()[i * 784 + j] =
          static_cast<uint8_t>(pixel(rng) + (j * 10 / 784 == c ? 120 : 0));
    }
  }
  return {x, y};
}

datasets::TrainTest load() {
  try {
    return datasets::fashion_mnist::load_data();
  } catch (const NotFound& e) {
    std::printf("Fashion-MNIST not found, training on synthetic data (%s)\n", e.what());
    return {synthetic_split(12000, 1), synthetic_split(2000, 2)};
  }
}

}  // namespace

int main() try {
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
  std::printf("replicas: %d\n", strategy->num_replicas_in_sync());
  const int64_t GLOBAL_BATCH = 128 * strategy->num_replicas_in_sync();

  auto [train, test] = load();
  auto [x_train, y_train] = train;
  auto [x_test, y_test] = test;
  Dataset dataset = Dataset::from_tensor_slices({x_train, y_train})
                        .take(12000)
                        .shuffle(12000, /*seed=*/1)
                        .batch(GLOBAL_BATCH)
                        .map(preprocess);

  auto scope = strategy->scope();
  Sequential model({
      Input({784}),
      layers::Dense({.units = 128, .activation = "relu"}),
      layers::Dense({.units = 10, .activation = "softmax"}),
  });
  model.compile({.optimizer = optimizers::Adam(),
                 .loss = losses::CategoricalCrossentropy(),
                 .metrics = {metrics::CategoricalAccuracy()}});
  model.fit(dataset, {.epochs = 1, .verbose = 2});

  auto results = model.evaluate(
      Dataset::from_tensor_slices({x_test, y_test}).take(2000).batch(GLOBAL_BATCH).map(preprocess));
  const double accuracy = results["categorical_accuracy"];
  std::printf("test loss: %.4f - test accuracy: %.4f\n", results["loss"], accuracy);
  if (!(accuracy > 0.5)) {
    std::fprintf(stderr, "consumer: expected test accuracy above 0.5 after one epoch, got %.4f\n",
                 accuracy);
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "consumer: %s\n", e.what());
  return 1;
}
