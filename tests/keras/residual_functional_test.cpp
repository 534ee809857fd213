// A residual functional model,
//   x -> Dense(8, tanh) ─┐
//   x -> Dense(8) ───────┴ Add -> Dense(1)
// trains with model.fit on a fixed problem, and its gradients pass the float64 checker.
//
// Dense has no dtype option (its weights are float32), so the float64 check runs on the same
// graph composed from the ops Dense::call uses (linear with the fused tanh, add), with the
// model's trained weights widened to float64; a forward comparison ties that composition to
// model.predict.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/autodiff/functions.h"
#include "lockstep/keras/layers.h"
#include "lockstep/keras/model.h"
#include "lockstep/keras/optimizers/sgd.h"
#include "testing/gradient_check.h"

namespace lockstep::keras {
namespace {

struct Residual {
  std::shared_ptr<layers::Dense> hidden, projection, head;
  std::unique_ptr<Model> model;
};

Residual make_residual() {
  Residual r;
  r.hidden =
      std::make_shared<layers::Dense>(layers::DenseOptions{.units = 8, .activation = "tanh"});
  r.projection = std::make_shared<layers::Dense>(layers::DenseOptions{.units = 8});
  r.head = std::make_shared<layers::Dense>(layers::DenseOptions{.units = 1});
  auto x = Input({5});
  auto sum = layers::Add()({(*r.hidden)(x), (*r.projection)(x)});
  r.model = std::make_unique<Model>(x, (*r.head)(sum));
  return r;
}

// y = sin(x0) + x1 * x2 - 0.5 x3 + 0.25 x4: smooth, partly linear (the projection's job).
std::pair<Tensor, Tensor> fixed_problem(int64_t n) {
  Generator gen(9);
  Tensor x = lockstep::testing::random_f64(gen, {n, 5}).to(DType::float32);
  Tensor y({n, 1}, DType::float32);
  for (int64_t i = 0; i < n; ++i) {
    const float* r = x.data<float>() + i * 5;
    y.data<float>()[i] = std::sin(r[0]) + r[1] * r[2] - 0.5f * r[3] + 0.25f * r[4];
  }
  return {x, y};
}

TEST(ResidualFunctionalModel, FitLowersTheLossOnAFixedProblem) {
  set_random_seed(1);
  Residual r = make_residual();
  EXPECT_EQ(r.model->count_params(), (5 * 8 + 8) * 2 + 8 + 1);
  r.model->compile({.optimizer = optimizers::SGD({.learning_rate = 0.1}), .loss = "mse"});
  auto [x, y] = fixed_problem(64);
  auto history =
      r.model->fit(x, y, {.epochs = 15, .verbose = 0, .batch_size = 16, .shuffle = false});
  const std::vector<double>& loss = history.history["loss"];
  ASSERT_EQ(loss.size(), 15u);
  EXPECT_LT(loss.back(), 0.5 * loss.front());
}

TEST(ResidualFunctionalModel, Float64GradientsOfTheComposedGraphMatchCentralDifferences) {
  set_random_seed(2);
  Residual r = make_residual();
  auto [x, y] = fixed_problem(7);
  const Tensor predicted = r.model->predict(x);

  auto wide = [](const Variable& v) { return v.raw_value().to(DType::float64); };
  std::vector<Tensor> inputs{x.to(DType::float64),       wide(r.hidden->kernel()),
                             wide(r.hidden->bias()),     wide(r.projection->kernel()),
                             wide(r.projection->bias()), wide(r.head->kernel()),
                             wide(r.head->bias())};
  auto f = [](const std::vector<Tensor>& in) {
    Tensor h = linear(in[0], in[1], in[2], ops::FusedActivation::tanh);
    Tensor p = linear(in[0], in[3], in[4]);
    return linear(add(h, p), in[5], in[6]);
  };
  // The composition is the model: same outputs up to float32 rounding.
  const std::vector<double> composed = f(inputs).to_vector<double>();
  const std::vector<float> model_out = predicted.to_vector<float>();
  ASSERT_EQ(composed.size(), model_out.size());
  for (size_t i = 0; i < composed.size(); ++i) EXPECT_NEAR(composed[i], model_out[i], 1e-5);
  EXPECT_TRUE(lockstep::testing::gradients_match(f, inputs));
}

}  // namespace
}  // namespace lockstep::keras
