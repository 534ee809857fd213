// BatchNormalization under a strategy whose replicas do not all get examples: 3 replicas on a
// global batch of 2 (slices of 1, 1 and 0). fit and evaluate finish (a collective inside call()
// used to wait forever for the replica with the empty slice), and the moving statistics follow the
// non-empty slices: equal to one replica on the same batch, checked against float64 statistics of
// the batch computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "lockstep/distribute/strategies.h"
#include "lockstep/keras.h"
#include "testing/classification_data.h"

namespace lockstep::keras {
namespace {

constexpr int64_t kIn = 5, kUnits = 3, kClasses = 2;

struct Result {
  std::vector<float> moving_mean, moving_variance;
  double eval_loss;
};

Result fit_one_step(distribute::Strategy& strategy, const testing::ClassificationData& data,
                    const std::vector<Tensor>& kernel_and_bias) {
  auto scope = strategy.scope();
  auto dense = std::make_shared<layers::Dense>(layers::DenseOptions{.units = kUnits});
  auto bn = std::make_shared<layers::BatchNormalization>(
      layers::BatchNormalizationOptions{.momentum = 0.5});
  Sequential model({Input({kIn}), std::shared_ptr<Layer>(dense), std::shared_ptr<Layer>(bn),
                    layers::Dense({.units = kClasses, .activation = "softmax"})});
  model.compile({.optimizer = optimizers::SGD({.learning_rate = 0.1}),
                 .loss = losses::CategoricalCrossentropy()});
  dense->kernel().assign(kernel_and_bias[0]);
  dense->bias().assign(kernel_and_bias[1]);
  Dataset ds = Dataset::from_tensor_slices({data.x, data.y}).batch(2);
  model.fit(ds, {.epochs = 1, .verbose = 0});
  auto eval = model.evaluate(ds, {.verbose = 0});
  return {bn->moving_mean().raw_value().to_vector<float>(),
          bn->moving_variance().raw_value().to_vector<float>(), eval.at("loss")};
}

TEST(BatchNormReplicas, EmptySliceFinishesAndMovingStatisticsFollowTheNonEmptySlices) {
  testing::ClassificationData data = testing::random_classification(2, kIn, kClasses, 9);
  std::mt19937_64 rng(4);
  std::vector<Tensor> kb = {testing::uniform_tensor(rng, {kIn, kUnits}, 1.0f),
                            testing::uniform_tensor(rng, {kUnits}, 0.5f)};
  distribute::MirroredStrategy one(1);
  Result expected = fit_one_step(one, data, kb);
  distribute::MirroredStrategy three(3);
  Result got = fit_one_step(three, data, kb);

  // float64 reference: the Dense outputs of the two examples (the moving statistics are
  // updated from the forward pass, before the step's update), their mean and biased variance,
  // and momentum 0.5 from the initial 0 and 1.
  const std::vector<float> x = data.x.to_vector<float>();
  const std::vector<float> w = kb[0].to_vector<float>(), b = kb[1].to_vector<float>();
  for (int64_t u = 0; u < kUnits; ++u) {
    double h[2];
    for (int e = 0; e < 2; ++e) {
      h[e] = b[static_cast<size_t>(u)];
      for (int64_t i = 0; i < kIn; ++i)
        h[e] += static_cast<double>(x[static_cast<size_t>(e * kIn + i)]) *
                w[static_cast<size_t>(i * kUnits + u)];
    }
    const double mean = (h[0] + h[1]) / 2,
                 var = ((h[0] - mean) * (h[0] - mean) + (h[1] - mean) * (h[1] - mean)) / 2;
    const double ref_mean = 0.5 * 0.0 + 0.5 * mean, ref_var = 0.5 * 1.0 + 0.5 * var;
    const size_t k = static_cast<size_t>(u);
    EXPECT_NEAR(expected.moving_mean[k], ref_mean, 1e-5 * (1 + std::abs(ref_mean)));
    EXPECT_NEAR(expected.moving_variance[k], ref_var, 1e-5 * (1 + std::abs(ref_var)));
    EXPECT_NEAR(got.moving_mean[k], expected.moving_mean[k],
                1e-5 * (1 + std::abs(expected.moving_mean[k])))
        << "unit " << u;
    EXPECT_NEAR(got.moving_variance[k], expected.moving_variance[k],
                1e-5 * (1 + std::abs(expected.moving_variance[k])))
        << "unit " << u;
  }
  EXPECT_TRUE(std::isfinite(got.eval_loss));
}

}  // namespace
}  // namespace lockstep::keras
