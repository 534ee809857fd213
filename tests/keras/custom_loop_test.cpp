// A custom training loop (GradientTape + strategy.run + strategy.reduce),
// written as examples/custom_loop.cpp writes it, ends with the weights model.fit reaches on the
// same data, and reports the same epoch loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/distribute/distributed_dataset.h"
#include "lockstep/distribute/strategies.h"
#include "lockstep/keras.h"

namespace lockstep::keras {
namespace {

constexpr int64_t kIn = 784, kHidden = 128, kClasses = 10;

Sequential seed_mlp() {
  return Sequential({
      Input({kIn}),
      layers::Dense({.units = kHidden, .activation = "relu"}),
      layers::Dense({.units = kClasses, .activation = "softmax"}),
  });
}

// 2 * 60 + 37 examples in global batches of 60: the last one (37) splits unevenly over 3 or 8.
Dataset random_dataset() {
  const int64_t n = 157;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> label(0, kClasses - 1);
  std::vector<float> x(static_cast<size_t>(n * kIn)), y(static_cast<size_t>(n * kClasses));
  for (float& v : x) v = pixel(rng);
  for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i * kClasses + label(rng))] = 1.0f;
  return Dataset::from_tensor_slices(
             {Tensor::from_vector(x, {n, kIn}), Tensor::from_vector(y, {n, kClasses})})
      .batch(60);
}

std::vector<Tensor> initial_weights() {
  set_random_seed(99);
  Sequential m = seed_mlp();
  std::vector<Tensor> out;
  for (const Variable& v : m.weights()) out.push_back(v.raw_value().clone());
  return out;
}

struct Result {
  std::vector<Tensor> weights;
  std::vector<double> epoch_loss;
};

Result with_fit(int replicas, const std::vector<Tensor>& init, const Dataset& ds, int epochs) {
  distribute::MirroredStrategy strategy(replicas);
  auto scope = strategy.scope();
  Sequential model = seed_mlp();
  std::vector<Variable> vars = model.weights();
  for (size_t i = 0; i < vars.size(); ++i) vars[i].assign(init[i]);
  model.compile({.optimizer = optimizers::Adam(), .loss = losses::CategoricalCrossentropy()});
  callbacks::History h = model.fit(ds, {.epochs = epochs, .verbose = 0});
  Result r{{}, h.history.at("loss")};
  for (const Variable& v : vars) r.weights.push_back(v.raw_value().clone());
  return r;
}

// The loop of examples/custom_loop.cpp.
Result with_custom_loop(int replicas, const std::vector<Tensor>& init, const Dataset& ds,
                        int epochs) {
  distribute::MirroredStrategy strategy(replicas);
  auto scope = strategy.scope();
  Sequential model = seed_mlp();
  optimizers::Adam optimizer;
  losses::CategoricalCrossentropy loss_fn;
  const std::vector<Variable> vars = model.trainable_weights();
  for (size_t i = 0; i < vars.size(); ++i) vars[i].assign(init[i]);
  optimizer.build(vars);

  Result r;
  auto dist = strategy.experimental_distribute_dataset(ds);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    double loss_sum = 0;
    int64_t examples = 0;
    auto it = dist.make_iterator();
    while (auto batch = it.next()) {
      const int64_t global_batch = it.last_global_batch_size();
      auto losses = strategy.run(
          [&](distribute::ReplicaContext& ctx, const Element& slice) {
            std::vector<Tensor> grads(vars.size());
            Tensor loss = Tensor::scalar(0.0);
            if (slice[0].dim(0) > 0) {
              GradientTape tape;
              Tensor y_pred = model(slice[0], /*training=*/true);
              loss = distribute::compute_average_loss(loss_fn.call(slice[1], y_pred), global_batch);
              grads = tape.gradient(loss, vars);
            }
            for (size_t i = 0; i < grads.size(); ++i) {
              if (!grads[i].defined()) grads[i] = Tensor::zeros(vars[i].shape());
              grads[i] = ctx.all_reduce(distribute::ReduceOp::SUM, grads[i]);
            }
            if (ctx.local_replica_id() == 0) optimizer.apply_gradients(grads, vars);
            ctx.barrier();
            return loss;
          },
          *batch);
      loss_sum += strategy.reduce(distribute::ReduceOp::SUM, losses).item() *
                  static_cast<double>(global_batch);
      examples += global_batch;
    }
    r.epoch_loss.push_back(loss_sum / static_cast<double>(examples));
  }
  EXPECT_EQ(optimizer.iterations(), epochs * 3);
  for (const Variable& v : vars) r.weights.push_back(v.raw_value().clone());
  return r;
}

double max_relative_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b,
                               double floor = 1e-2) {
  double worst = 0;
  for (size_t t = 0; t < a.size(); ++t) {
    std::vector<float> va = a[t].to_vector<float>(), vb = b[t].to_vector<float>();
    for (size_t i = 0; i < va.size(); ++i) {
      double d = std::abs(static_cast<double>(va[i]) - vb[i]);
      worst = std::max(worst, d / std::max(std::abs(static_cast<double>(vb[i])), floor));
    }
  }
  return worst;
}

class CustomLoop : public ::testing::TestWithParam<int> {};

TEST_P(CustomLoop, GradientTapeRunAndReduceReachTheWeightsAndLossOfFit) {
  const int replicas = GetParam();
  const int epochs = 2;
  Dataset ds = random_dataset();
  std::vector<Tensor> init = initial_weights();
  Result fit = with_fit(replicas, init, ds, epochs);
  Result loop = with_custom_loop(replicas, init, ds, epochs);

  ASSERT_EQ(loop.weights.size(), fit.weights.size());
  EXPECT_GT(max_relative_difference(fit.weights, init), 1e-2) << "training moved the weights";
  double d = max_relative_difference(loop.weights, fit.weights);
  std::printf("[ replicas=%d ] custom loop vs fit: max relative weight difference %.3g\n", replicas,
              d);
  EXPECT_LE(d, 1e-6);
  ASSERT_EQ(loop.epoch_loss.size(), fit.epoch_loss.size());
  for (size_t e = 0; e < fit.epoch_loss.size(); ++e) {
    EXPECT_NEAR(loop.epoch_loss[e], fit.epoch_loss[e], 1e-6 * fit.epoch_loss[e]) << "epoch " << e;
  }
}

INSTANTIATE_TEST_SUITE_P(Replicas, CustomLoop, ::testing::Values(1, 3, 8),
                         [](const auto& info) { return std::to_string(info.param) + "Replicas"; });

}  // namespace
}  // namespace lockstep::keras
