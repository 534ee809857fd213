// Image classification with a vision transformer, as Keras' ViT example builds it, on
// Fashion-MNIST, data-parallel over every core: patches of 4x4 pixels (49 tokens) projected to
// width 64 by a strided convolution, learned position embeddings, 4 pre-norm transformer blocks
// (4 heads, MLP ratio 2), global average pooling and a softmax classifier.
//
//   vit_fashion_mnist [--epochs N] [--precision float32|mixed_bfloat16]
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "lockstep/lockstep.h"

using namespace lockstep;
using namespace lockstep::keras;

constexpr int64_t kImageSize = 28, kPatchSize = 4, kWidth = 64, kHeads = 4, kBlocks = 4;
constexpr int64_t kMlpRatio = 2, kClasses = 10;
constexpr int64_t kTokens = (kImageSize / kPatchSize) * (kImageSize / kPatchSize);

// uint8 images [B, 28, 28] and labels [B] -> float32 [B, 784] in [0, 1] and one-hot [B, 10].
Element preprocess(const Element& batch) {
  Tensor x = batch[0].to(DType::float32).reshape({-1, kImageSize * kImageSize});
  float* d = x.data<float>();
  for (int64_t i = 0; i < x.num_elements(); ++i) d[i] *= 1.0f / 255.0f;
  return {x, one_hot(batch[1].to(DType::int64), kClasses)};
}

Model create_vit_classifier() {
  auto inputs = Input({kImageSize * kImageSize});
  auto x = layers::Reshape({kImageSize, kImageSize, 1})(inputs);
  // Patches: a convolution whose stride is its kernel size cuts and projects them in one step.
  x = layers::Conv2D({.filters = kWidth,
                      .kernel_size = {kPatchSize, kPatchSize},
                      .strides = {kPatchSize, kPatchSize}})(x);
  x = layers::Reshape({kTokens, kWidth})(x);
  x = layers::Add()({x, layers::PositionEmbedding({.sequence_length = kTokens})(x)});
  for (int64_t i = 0; i < kBlocks; ++i) {
    // Layer normalization, multi-head self-attention, skip connection.
    auto x1 = layers::LayerNormalization({.epsilon = 1e-6})(x);
    auto attention =
        layers::MultiHeadAttention({.num_heads = kHeads, .key_dim = kWidth / kHeads})({x1, x1});
    auto x2 = layers::Add()({attention, x});
    // Layer normalization, MLP, skip connection.
    auto x3 = layers::LayerNormalization({.epsilon = 1e-6})(x2);
    x3 = layers::Dense({.units = kMlpRatio * kWidth, .activation = "gelu"})(x3);
    x3 = layers::Dense({.units = kWidth})(x3);
    x = layers::Add()({x3, x2});
  }
  auto representation = layers::LayerNormalization({.epsilon = 1e-6})(x);
  representation = layers::GlobalAveragePooling1D()(representation);
  // The classifier stays float32 under mixed precision (Keras' idiom for a softmax output).
  auto outputs = layers::Dense({.units = kClasses, .activation = "softmax", .dtype = "float32"})(
      representation);
  return Model(inputs, outputs);
}

int main(int argc, char** argv) try {
  int epochs = 10;
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--precision") mixed_precision::set_global_policy(argv[i + 1]);
    if (arg == "--epochs") epochs = std::atoi(argv[i + 1]);
  }
  std::unique_ptr<distribute::Strategy> tpu_strategy;
  distribute::Strategy* strategy;
  try {
    AcceleratorClusterResolver tpu;  // every core of this machine, one replica each
    connect_to_cluster(tpu);
    initialize_system(tpu);
    tpu_strategy = std::make_unique<distribute::AcceleratorStrategy>(tpu);
    strategy = tpu_strategy.get();
  } catch (const NotFound&) {
    strategy = &distribute::get_strategy();
  }
  std::cout << "num_replicas_in_sync: " << strategy->num_replicas_in_sync() << "\n";
  const int64_t GLOBAL_BATCH = 128 * strategy->num_replicas_in_sync();

  auto [train, test] = datasets::fashion_mnist::load_data();
  auto [x_train, y_train] = train;
  Dataset dataset = Dataset::from_tensor_slices({x_train, y_train})
                        .shuffle(60000, /*seed=*/1)
                        .repeat()
                        .batch(GLOBAL_BATCH)
                        .map(preprocess)
                        .prefetch(Dataset::AUTOTUNE);

  const int64_t steps_per_epoch = 60000 / GLOBAL_BATCH;
  // Cosine decay to 0 over the whole run, as transformer recipes train: the last epochs settle
  // instead of moving a point of test accuracy from one epoch to the next.
  auto learning_rate = std::make_shared<optimizers::schedules::CosineDecay>(
      optimizers::schedules::CosineDecayOptions{.initial_learning_rate = 1e-3,
                                                .decay_steps = epochs * steps_per_epoch});

  auto scope = strategy->scope();
  Model model = create_vit_classifier();
  model.compile({.optimizer = optimizers::Adam({.learning_rate = learning_rate}),
                 .loss = losses::CategoricalCrossentropy(),
                 .metrics = {metrics::CategoricalAccuracy()}});
  std::cout << model.summary();
  model.fit(dataset, {.epochs = epochs, .steps_per_epoch = steps_per_epoch});

  auto [x_test, y_test] = test;
  auto results = model.evaluate(
      Dataset::from_tensor_slices({x_test, y_test}).batch(GLOBAL_BATCH).map(preprocess));
  std::cout << "test loss: " << results["loss"]
            << " - test accuracy: " << results["categorical_accuracy"] << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "vit_fashion_mnist: " << e.what() << "\n";
  return 1;
}
