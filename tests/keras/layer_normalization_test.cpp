// BatchNormalization's moving statistics (Keras' momentum rule with the biased batch variance),
// its inference path, its replica-safe update under a strategy, and LayerNormalization's values,
// all against float64 loops written here.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "lockstep/distribute/strategies.h"
#include "lockstep/keras/layers/normalization.h"
#include "testing/gradient_check.h"

namespace lockstep::keras::layers {
namespace {

struct Moments {
  std::vector<double> mean, var;  // biased variance
};

// Per-channel statistics over rows [M, C] given as one flat vector.
Moments moments(const std::vector<double>& x, int64_t c) {
  const int64_t m = static_cast<int64_t>(x.size()) / c;
  Moments r{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0)};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < c; ++j) r.mean[j] += x[i * c + j] / double(m);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < c; ++j)
      r.var[j] += (x[i * c + j] - r.mean[j]) * (x[i * c + j] - r.mean[j]) / double(m);
  return r;
}

std::vector<double> values(const Tensor& t) {
  return t.to(DType::float64).to_vector<double>();
}

TEST(BatchNormalization, TrainingUpdatesMovingStatisticsWithTheBiasedBatchVariance) {
  BatchNormalization bn({.momentum = 0.75, .dtype = "float64"});
  Generator gen(1);
  const Tensor x = lockstep::testing::random_f64(gen, {3, 5, 4}, -2, 3);
  const Tensor y = bn(x, /*training=*/true);
  const Moments b = moments(values(x), 4);
  const std::vector<double> mm = values(bn.moving_mean().raw_value());
  const std::vector<double> mv = values(bn.moving_variance().raw_value());
  const std::vector<double> xv = values(x), yv = values(y);
  for (int j = 0; j < 4; ++j) {
    EXPECT_NEAR(mm[j], 0.0 * 0.75 + b.mean[j] * 0.25, 1e-12);
    EXPECT_NEAR(mv[j], 1.0 * 0.75 + b.var[j] * 0.25, 1e-12);
    // The output uses the batch statistics (gamma 1, beta 0 at initialization).
    for (size_t i = j; i < xv.size(); i += 4)
      EXPECT_NEAR(yv[i], (xv[i] - b.mean[j]) / std::sqrt(b.var[j] + 1e-3), 1e-12);
  }
}

TEST(BatchNormalization, InferenceUsesTheMovingStatisticsAndLeavesThemAlone) {
  BatchNormalization bn({.epsilon = 0.01, .dtype = "float64"});
  Generator gen(2);
  const Tensor x = lockstep::testing::random_f64(gen, {7, 3});
  bn(x);  // builds
  bn.moving_mean().assign(Tensor::from_vector<double>({0.5, -1, 2}, {3}));
  bn.moving_variance().assign(Tensor::from_vector<double>({4, 0.25, 1}, {3}));
  bn.gamma().assign(Tensor::from_vector<double>({2, 1, -1}, {3}));
  bn.beta().assign(Tensor::from_vector<double>({0, 1, 3}, {3}));
  const std::vector<double> yv = values(bn(x, /*training=*/false)), xv = values(x);
  const double mean[] = {0.5, -1, 2}, var[] = {4, 0.25, 1}, g[] = {2, 1, -1}, be[] = {0, 1, 3};
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t j = i % 3;
    EXPECT_NEAR(yv[i], g[j] * (xv[i] - mean[j]) / std::sqrt(var[j] + 0.01) + be[j], 1e-12);
  }
  EXPECT_EQ(values(bn.moving_mean().raw_value()), (std::vector<double>{0.5, -1, 2}));
}

TEST(BatchNormalization, NonTrainableLayerRunsInInferenceModeAsKeras) {
  BatchNormalization bn({.dtype = "float64"});
  Generator gen(3);
  const Tensor x = lockstep::testing::random_f64(gen, {5, 2});
  bn(x);
  bn.set_trainable(false);
  const std::vector<double> yv = values(bn(x, /*training=*/true)), xv = values(x);
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(yv[i], xv[i] / std::sqrt(1 + 1e-3), 1e-12);
  EXPECT_EQ(values(bn.moving_mean().raw_value()), (std::vector<double>{0, 0}));
}

TEST(BatchNormalization, ReplicasUpdateMovingStatisticsOnceFromTheGlobalBatch) {
  // Three replicas with uneven slices (2, 3 and 4 rows) of one global batch: the moving
  // statistics must be those of the whole batch, applied once (not three times, not raced).
  distribute::MirroredStrategy strategy(3);
  auto scope = strategy.scope();
  BatchNormalization bn({.momentum = 0.5, .dtype = "float64"});
  Generator gen(4);
  const Tensor global = lockstep::testing::random_f64(gen, {9, 3}, -1, 4);
  bn(global.slice(0, 1));  // builds (inference: no update)
  const int64_t begin[] = {0, 2, 5}, end[] = {2, 5, 9};
  strategy.run([&](distribute::ReplicaContext& ctx) {
    const int r = ctx.local_replica_id();
    bn(global.slice(begin[r], end[r]).clone(), /*training=*/true);
  });
  const Moments g = moments(values(global), 3);
  const std::vector<double> mm = values(bn.moving_mean().raw_value());
  const std::vector<double> mv = values(bn.moving_variance().raw_value());
  for (int j = 0; j < 3; ++j) {
    EXPECT_NEAR(mm[j], 0.5 * 0 + 0.5 * g.mean[j], 1e-12);
    EXPECT_NEAR(mv[j], 0.5 * 1 + 0.5 * g.var[j], 1e-12);
  }
}

TEST(BatchNormalization, RejectsAxesOtherThanTheLast) {
  EXPECT_THROW(BatchNormalization({.axis = 1}), InvalidArgument);
  EXPECT_THROW(BatchNormalization({.momentum = 1.5}), InvalidArgument);
  EXPECT_THROW(LayerNormalization({.axis = 0}), InvalidArgument);
}

TEST(LayerNormalization, NormalizesEachRowOverTheLastAxis) {
  LayerNormalization ln({.epsilon = 1e-2, .dtype = "float64"});
  Generator gen(5);
  const Tensor x = lockstep::testing::random_f64(gen, {3, 2, 5}, -3, 2);
  ln(x);
  ln.gamma().assign(Tensor::from_vector<double>({1, 2, 3, -1, 0.5}, {5}));
  ln.beta().assign(Tensor::from_vector<double>({0, 0.5, -1, 2, 1}, {5}));
  const std::vector<double> yv = values(ln(x)), xv = values(x);
  const double g[] = {1, 2, 3, -1, 0.5}, b[] = {0, 0.5, -1, 2, 1};
  for (size_t r = 0; r < 6; ++r) {
    const Moments m = moments(std::vector<double>(xv.begin() + r * 5, xv.begin() + r * 5 + 5), 1);
    // moments with c = 1 treats the row as 5 samples of one channel.
    for (size_t d = 0; d < 5; ++d) {
      const double want = g[d] * (xv[r * 5 + d] - m.mean[0]) / std::sqrt(m.var[0] + 1e-2) + b[d];
      EXPECT_NEAR(yv[r * 5 + d], want, 1e-12);
    }
  }
}

}  // namespace
}  // namespace lockstep::keras::layers
