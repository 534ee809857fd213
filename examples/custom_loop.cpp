// A custom training loop under a distribution strategy, as the TensorFlow guide "Custom training
// with tf.distribute.Strategy" writes it: GradientTape + strategy.run + strategy.reduce. It
// trains the seed model (784-128-10) and computes, step for step, what model.fit computes.
//
//   custom_loop                    Fashion-MNIST (see lockstep/data/datasets.h), 3 epochs
//   custom_loop --synthetic        a small random dataset (what CTest runs)
//   custom_loop --replicas N       N replicas (default: one per core)
//
// The rules that make N replicas equal to one replica on the same global batches:
//   * each replica's loss is the SUM of its per-example losses divided by the GLOBAL batch size
//     (distribute::compute_average_loss), so summing the replicas' gradients gives the gradient
//     of the mean over the global batch;
//   * the gradients are summed over replicas (ctx.all_reduce with ReduceOp::SUM);
//   * the variables exist once, shared by the replica threads: one replica applies the update
//     while the others wait at a barrier, so that nobody reads a half-updated weight.
// (model.fit does the same with a reduce-scatter and lets every replica update its own slice of
// the weights; see distribute/replicated_step.h. The result is the same.)
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>

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

// 1000 random "images" whose label is the brightest of 10 pixel bands: learnable, and tiny.
Dataset synthetic_dataset(int64_t global_batch) {
  const int64_t n = 1000;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> pixel(0, 120), label(0, 9);
  Tensor x({n, 28, 28}, DType::uint8), y({n}, DType::uint8);
  for (int64_t i = 0; i < n; ++i) {
    int c = label(rng);
    y.data<uint8_t>()[i] = static_cast<uint8_t>(c);
    for (int64_t j = 0; j < 784; ++j) {
      int v = pixel(rng) + (j * 10 / 784 == c ? 120 : 0);
      x.data<uint8_t>()[i * 784 + j] = static_cast<uint8_t>(v);
    }
  }
  return Dataset::from_tensor_slices({x, y})
      .shuffle(n, /*seed=*/1)
      .batch(global_batch)
      .map(preprocess);
}

Dataset fashion_mnist(int64_t global_batch) {
  auto [train, test] = datasets::fashion_mnist::load_data();
  auto [x_train, y_train] = train;
  return Dataset::from_tensor_slices({x_train, y_train})
      .shuffle(60000, /*seed=*/1)
      .batch(global_batch)  // global batches: the strategy splits them over the replicas
      .map(preprocess)
      .prefetch(Dataset::AUTOTUNE);
}

}  // namespace

int main(int argc, char** argv) try {
  bool synthetic = false;
  int replicas = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--synthetic") == 0) {
      synthetic = true;
    } else if (std::strcmp(argv[i], "--replicas") == 0 && i + 1 < argc) {
      replicas = std::stoi(argv[++i]);
    } else {
      std::cerr << "usage: custom_loop [--synthetic] [--replicas N]\n";
      return 2;
    }
  }

  auto strategy = replicas > 0 ? std::make_unique<distribute::MirroredStrategy>(replicas)
                               : std::make_unique<distribute::MirroredStrategy>();
  std::cout << "replicas: " << strategy->num_replicas_in_sync() << "\n";
  const int64_t GLOBAL_BATCH = 64 * strategy->num_replicas_in_sync();
  const int EPOCHS = synthetic ? 2 : 3;

  Dataset dataset = synthetic ? synthetic_dataset(GLOBAL_BATCH) : fashion_mnist(GLOBAL_BATCH);

  // Model, optimizer and their variables are created inside the strategy's scope.
  auto scope = strategy->scope();
  Sequential model({
      Input({784}),
      layers::Dense({.units = 128, .activation = "relu"}),
      layers::Dense({.units = 10, .activation = "softmax"}),
  });
  optimizers::Adam optimizer;
  losses::CategoricalCrossentropy loss_fn;
  const std::vector<Variable> vars = model.trainable_weights();
  optimizer.build(vars);  // slots now, on this thread, rather than inside the first step

  auto dist = strategy->experimental_distribute_dataset(dataset);
  for (int epoch = 0; epoch < EPOCHS; ++epoch) {
    double loss_sum = 0;  // sum over steps of (mean loss of the step) * (global batch size)
    int64_t examples = 0;
    auto it = dist.make_iterator();
    while (auto batch = it.next()) {
      const int64_t global_batch = it.last_global_batch_size();

      // Runs on every replica, each with its own slice of the global batch.
      auto step = [&](distribute::ReplicaContext& ctx, const Element& slice) {
        std::vector<Tensor> grads(vars.size());
        Tensor loss = Tensor::scalar(0.0);
        if (slice[0].dim(0) > 0) {  // the last global batch may leave a replica nothing
          GradientTape tape;
          Tensor y_pred = model(slice[0], /*training=*/true);
          loss = distribute::compute_average_loss(loss_fn.call(slice[1], y_pred), global_batch);
          grads = tape.gradient(loss, vars);
        }
        for (size_t i = 0; i < grads.size(); ++i) {
          if (!grads[i].defined()) grads[i] = Tensor::zeros(vars[i].shape());
          grads[i] = ctx.all_reduce(distribute::ReduceOp::SUM, grads[i]);
        }
        // Every replica has finished reading the weights (the all-reduce waited for all of them);
        // one applies the summed gradients, the others wait until the weights are consistent.
        if (ctx.local_replica_id() == 0) optimizer.apply_gradients(grads, vars);
        ctx.barrier();
        return loss;
      };
      distribute::PerReplica<Tensor> losses = strategy->run(step, *batch);

      // Each replica's loss is its share of the global batch's mean: their sum is the mean.
      double step_loss = strategy->reduce(distribute::ReduceOp::SUM, losses).item();
      loss_sum += step_loss * static_cast<double>(global_batch);
      examples += global_batch;
    }
    std::cout << "epoch " << epoch + 1 << "/" << EPOCHS
              << " - loss: " << loss_sum / static_cast<double>(examples) << "\n";
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "custom_loop: " << e.what() << "\n";
  return 1;
}
