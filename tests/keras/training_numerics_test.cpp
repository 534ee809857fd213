// Training numerics against an independent float64 reference.
//
// The reference below is written from Keras' definitions with plain loops and never calls
// Lockstep's ops: the MLP's forward and hand-written backward, Keras' categorical cross-entropy
// on probabilities (normalise, clip to [1e-7, 1 - 1e-7], zero gradient where clipped) and Keras 3's
// optimizer update rules. Lockstep trains in float32 from the same float32 weights and data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "lockstep/keras.h"

namespace lockstep::keras {
namespace {

using Vec = std::vector<double>;

// ---- float64 reference ---------------------------------------------------------------------

constexpr double kEps = 1e-7;  // keras.backend.epsilon()

// dense(relu) -> dense(softmax); kernels row-major [in, out], as Lockstep's Dense kernels.
struct RefMlp {
  int64_t in, hidden, out;
  Vec w1, b1, w2, b2;
  std::vector<Vec*> params() { return {&w1, &b1, &w2, &b2}; }
};

// Per-example Keras categorical cross-entropy on probabilities p[c]; when dp is given, also its
// gradient with respect to p, times `scale`.
double reference_cce(const double* y, const double* p, size_t c, double scale, double* dp) {
  double s = 0;
  for (size_t i = 0; i < c; ++i) s += p[i];
  double loss = 0, dot = 0;
  Vec dq(c);
  for (size_t i = 0; i < c; ++i) {
    double q = p[i] / s;
    double clipped = std::min(std::max(q, kEps), 1 - kEps);
    loss -= y[i] * std::log(clipped);
    bool inside = q >= kEps && q <= 1 - kEps;  // tf.clip_by_value passes the gradient here only
    dq[i] = inside ? -y[i] / q : 0.0;
    dot += dq[i] * q;
  }
  if (dp) {
    for (size_t i = 0; i < c; ++i) dp[i] = scale * (dq[i] - dot) / s;  // through q = p / sum(p)
  }
  return loss;
}

struct RefResult {
  Vec per_example_loss;
  std::vector<Vec> grads;  // w1, b1, w2, b2 of loss = sum(per-example) / batch
};

// Forward and backward on b examples: x [b, in], y one-hot [b, out].
// from_logits: the loss as Keras computes it for a softmax output (_keras_logits): from the
// logits z, -sum_k y_k log_softmax(z)_k, whose gradient is softmax(z) sum(y) - y; no clipping.
RefResult reference_forward_backward(const RefMlp& m, const std::vector<float>& x,
                                     const std::vector<float>& y, int64_t batch,
                                     bool from_logits = false) {
  const size_t in = static_cast<size_t>(m.in), hd = static_cast<size_t>(m.hidden),
               out = static_cast<size_t>(m.out), b = static_cast<size_t>(batch);
  RefResult r;
  r.grads = {Vec(m.w1.size()), Vec(m.b1.size()), Vec(m.w2.size()), Vec(m.b2.size())};
  Vec& gw1 = r.grads[0];
  Vec& gb1 = r.grads[1];
  Vec& gw2 = r.grads[2];
  Vec& gb2 = r.grads[3];
  for (size_t e = 0; e < b; ++e) {
    const float* xe = &x[e * in];
    // h = relu(x w1 + b1)
    Vec pre(hd), h(hd);
    for (size_t j = 0; j < hd; ++j) {
      double a = m.b1[j];
      for (size_t i = 0; i < in; ++i) a += xe[i] * m.w1[i * hd + j];
      pre[j] = a;
      h[j] = a > 0 ? a : 0.0;
    }
    // p = softmax(h w2 + b2)
    Vec z(out), p(out);
    double zmax = -INFINITY, zsum = 0;
    for (size_t k = 0; k < out; ++k) {
      double a = m.b2[k];
      for (size_t j = 0; j < hd; ++j) a += h[j] * m.w2[j * out + k];
      z[k] = a;
      zmax = std::max(zmax, a);
    }
    for (size_t k = 0; k < out; ++k) zsum += std::exp(z[k] - zmax);
    for (size_t k = 0; k < out; ++k) p[k] = std::exp(z[k] - zmax) / zsum;
    // loss and dL/dp, with L = sum(per-example) / b
    Vec ye(y.begin() + static_cast<std::ptrdiff_t>(e * out),
           y.begin() + static_cast<std::ptrdiff_t>((e + 1) * out));
    Vec dz(out);
    if (from_logits) {
      const double lse = zmax + std::log(zsum);
      double loss = 0, ysum = 0;
      for (size_t k = 0; k < out; ++k) loss -= ye[k] * (z[k] - lse), ysum += ye[k];
      r.per_example_loss.push_back(loss);
      for (size_t k = 0; k < out; ++k) dz[k] = (p[k] * ysum - ye[k]) / static_cast<double>(b);
    } else {
      Vec dp(out);
      r.per_example_loss.push_back(
          reference_cce(ye.data(), p.data(), out, 1.0 / static_cast<double>(b), dp.data()));
      // softmax: dz_k = p_k (dp_k - sum_j p_j dp_j)
      double pdp = 0;
      for (size_t k = 0; k < out; ++k) pdp += p[k] * dp[k];
      for (size_t k = 0; k < out; ++k) dz[k] = p[k] * (dp[k] - pdp);
    }
    // second dense
    Vec dh(hd, 0.0);
    for (size_t j = 0; j < hd; ++j) {
      for (size_t k = 0; k < out; ++k) {
        gw2[j * out + k] += h[j] * dz[k];
        dh[j] += dz[k] * m.w2[j * out + k];
      }
    }
    for (size_t k = 0; k < out; ++k) gb2[k] += dz[k];
    // relu, first dense
    for (size_t j = 0; j < hd; ++j) {
      double dpre = pre[j] > 0 ? dh[j] : 0.0;
      gb1[j] += dpre;
      for (size_t i = 0; i < in; ++i) gw1[i * hd + j] += xe[i] * dpre;
    }
  }
  return r;
}

// Keras 3's update rules (keras/src/optimizers/{adam,sgd,rmsprop}.py).
struct RefOptimizer {
  enum Kind { kAdam, kSgdMomentum, kRmsprop } kind;
  double lr;
  double beta_1 = 0.9, beta_2 = 0.999, momentum = 0.9, rho = 0.9, epsilon = 1e-7;
  int64_t t = 0;
  std::vector<Vec> m, v;

  void apply(const std::vector<Vec*>& params, const std::vector<Vec>& grads) {
    if (m.empty()) {
      for (const Vec* p : params) m.emplace_back(p->size(), 0.0), v.emplace_back(p->size(), 0.0);
    }
    ++t;
    const double alpha = lr * std::sqrt(1 - std::pow(beta_2, static_cast<double>(t))) /
                         (1 - std::pow(beta_1, static_cast<double>(t)));
    for (size_t k = 0; k < params.size(); ++k) {
      Vec& w = *params[k];
      for (size_t i = 0; i < w.size(); ++i) {
        const double g = grads[k][i];
        switch (kind) {
          case kAdam:
            m[k][i] += (g - m[k][i]) * (1 - beta_1);
            v[k][i] += (g * g - v[k][i]) * (1 - beta_2);
            w[i] -= alpha * m[k][i] / (std::sqrt(v[k][i]) + epsilon);
            break;
          case kSgdMomentum:
            m[k][i] = momentum * m[k][i] - lr * g;
            w[i] += m[k][i];
            break;
          case kRmsprop:
            // Keras 3 (and TF's ApplyRMSProp kernel) put epsilon inside the square root.
            v[k][i] = rho * v[k][i] + (1 - rho) * g * g;
            w[i] -= lr * g / std::sqrt(v[k][i] + epsilon);
            break;
        }
      }
    }
  }
};

// One reference training step on a batch; returns the batch's mean loss before the update.
// One training step of the model, whose softmax output's loss fit computes from the logits.
double reference_step(RefMlp& m, RefOptimizer& opt, const std::vector<float>& x,
                      const std::vector<float>& y, int64_t b) {
  RefResult r = reference_forward_backward(m, x, y, b, /*from_logits=*/true);
  opt.apply(m.params(), r.grads);
  double s = 0;
  for (double l : r.per_example_loss) s += l;
  return s / static_cast<double>(b);
}

// ---- fixtures ------------------------------------------------------------------------------

struct Batch {
  std::vector<float> x, y;
  int64_t size;
};

std::vector<Batch> random_batches(const std::vector<int64_t>& sizes, int64_t in, int64_t classes,
                                  uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> label(0, classes - 1);
  std::vector<Batch> out;
  for (int64_t b : sizes) {
    Batch batch{std::vector<float>(static_cast<size_t>(b * in)),
                std::vector<float>(static_cast<size_t>(b * classes), 0.0f), b};
    for (float& v : batch.x) v = pixel(rng) < 0.3f ? 0.0f : pixel(rng);  // pixel-like: some zeros
    for (int64_t e = 0; e < b; ++e) batch.y[static_cast<size_t>(e * classes + label(rng))] = 1.0f;
    out.push_back(std::move(batch));
  }
  return out;
}

// Float32 initial weights (so both sides start from exactly the same values) and the reference
// model holding them in float64.
struct Init {
  std::vector<Tensor> tensors;
  RefMlp ref;
};

Init random_init(int64_t in, int64_t hidden, int64_t out, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto draw = [&](int64_t n, float limit, Vec& ref) {
    std::uniform_real_distribution<float> d(-limit, limit);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& e : v) e = d(rng);
    ref.assign(v.begin(), v.end());
    return v;
  };
  Init init;
  init.ref = {in, hidden, out, {}, {}, {}, {}};
  float l1 = std::sqrt(6.0f / static_cast<float>(in + hidden));
  float l2 = std::sqrt(6.0f / static_cast<float>(hidden + out));
  init.tensors = {Tensor::from_vector(draw(in * hidden, l1, init.ref.w1), {in, hidden}),
                  Tensor::from_vector(draw(hidden, 0.1f, init.ref.b1), {hidden}),
                  Tensor::from_vector(draw(hidden * out, l2, init.ref.w2), {hidden, out}),
                  Tensor::from_vector(draw(out, 0.1f, init.ref.b2), {out})};
  return init;
}

Sequential mlp(int64_t in, int64_t hidden, int64_t out) {
  return Sequential({
      Input({in}),
      layers::Dense({.units = hidden, .activation = "relu"}),
      layers::Dense({.units = out, .activation = "softmax"}),
  });
}

void assign_all(Model& model, const std::vector<Tensor>& values) {
  std::vector<Variable> ws = model.weights();
  ASSERT_EQ(ws.size(), values.size());
  for (size_t i = 0; i < ws.size(); ++i) ws[i].assign(values[i]);
}

// How far Lockstep's float32 weights are from the reference's:
//   elementwise: max |got - want| / max(|want|, 1e-2)  (weights passing near 0 compared at
//                1e-2 × the tolerance, absolutely)
//   norm:        max over tensors of ||got - want||_2 / ||want||_2
struct Comparison {
  double elementwise = 0, norm = 0;
};

Comparison compare(Model& model, RefMlp& ref) {
  std::vector<Variable> ws = model.weights();
  std::vector<Vec*> want = ref.params();
  Comparison c;
  for (size_t k = 0; k < ws.size(); ++k) {
    std::vector<float> got = ws[k].raw_value().to_vector<float>();
    EXPECT_EQ(got.size(), want[k]->size());
    double diff2 = 0, want2 = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      double w = (*want[k])[i], d = got[i] - w;
      c.elementwise = std::max(c.elementwise, std::abs(d) / std::max(std::abs(w), 1e-2));
      diff2 += d * d;
      want2 += w * w;
    }
    c.norm = std::max(c.norm, std::sqrt(diff2 / want2));
  }
  return c;
}

double relative(double got, double want) {
  return std::abs(got - want) / std::abs(want);
}

Dataset dataset_of(const std::vector<Batch>& batches, int64_t in, int64_t classes) {
  std::vector<float> x, y;
  int64_t n = 0;
  for (const Batch& b : batches) {
    x.insert(x.end(), b.x.begin(), b.x.end());
    y.insert(y.end(), b.y.begin(), b.y.end());
    n += b.size;
  }
  return Dataset::from_tensor_slices(
      {Tensor::from_vector(x, {n, in}), Tensor::from_vector(y, {n, classes})});
}

// ---- tests ---------------------------------------------------------------------------------

constexpr int64_t kIn = 784, kHidden = 128, kClasses = 10, kBatch = 32;

// Five steps of the seed MLP with train_on_batch; every step's loss and the final weights match.
// `elementwise_tolerance`: Adam's epsilon-hat update m / (sqrt(v) + 1e-7) is ill-conditioned
// where a gradient is within a few 1e-7 of zero (at |g| = 2e-6 in the first step, dw/dg is about
// 130), so float32 rounding of such a gradient — a sum over the batch that nearly cancels —
// moves that one weight by ~1e-6 whatever the implementation. The weights as a whole (norm) match
// to 1e-5 for every optimizer; the worst single element is held to 1e-5 for SGD and RMSprop
// (both well-conditioned: RMSprop's epsilon is inside the root) and to 1e-4 for Adam.
void check_five_steps(const optimizers::Optimizer& optimizer, RefOptimizer ref_opt,
                      double elementwise_tolerance, const char* label) {
  Init init = random_init(kIn, kHidden, kClasses, 21);
  std::vector<Batch> batches =
      random_batches({kBatch, kBatch, kBatch, kBatch, kBatch}, kIn, kClasses, 22);
  Sequential model = mlp(kIn, kHidden, kClasses);
  assign_all(model, init.tensors);
  model.compile(
      {.optimizer = OptimizerArg(optimizer.clone()), .loss = losses::CategoricalCrossentropy()});
  double worst_loss = 0;
  for (const Batch& b : batches) {
    double want = reference_step(init.ref, ref_opt, b.x, b.y, b.size);
    auto logs = model.train_on_batch(Tensor::from_vector(b.x, {b.size, kIn}),
                                     Tensor::from_vector(b.y, {b.size, kClasses}));
    worst_loss = std::max(worst_loss, relative(logs.at("loss"), want));
    EXPECT_NEAR(logs.at("loss"), want, 1e-5 * want) << label;
  }
  Comparison c = compare(model, init.ref);
  std::printf(
      "[ %s ] 5 steps: relative weight difference %.3g (norm), %.3g (worst element); "
      "loss %.3g\n",
      label, c.norm, c.elementwise, worst_loss);
  EXPECT_LE(c.norm, 1e-5) << label;
  EXPECT_LE(c.elementwise, elementwise_tolerance) << label;
}

TEST(TrainingNumerics, FiveAdamStepsOfTheSeedMlpMatchTheFloat64Reference) {
  check_five_steps(optimizers::Adam(), {.kind = RefOptimizer::kAdam, .lr = 1e-3}, 1e-4, "adam");
}

TEST(TrainingNumerics, FiveSgdMomentumStepsOfTheSeedMlpMatchTheFloat64Reference) {
  check_five_steps(optimizers::SGD({.learning_rate = 0.1, .momentum = 0.9}),
                   {.kind = RefOptimizer::kSgdMomentum, .lr = 0.1}, 1e-5, "sgd+momentum");
}

TEST(TrainingNumerics, FiveRmspropStepsOfTheSeedMlpMatchTheFloat64Reference) {
  check_five_steps(optimizers::RMSprop(), {.kind = RefOptimizer::kRmsprop, .lr = 1e-3}, 1e-5,
                   "rmsprop");
}

// The same through fit over a Dataset (five batches of 32, one epoch, in order).
TEST(TrainingNumerics, FitOverADatasetMatchesTheReferenceStepForStep) {
  Init init = random_init(kIn, kHidden, kClasses, 31);
  std::vector<Batch> batches =
      random_batches({kBatch, kBatch, kBatch, kBatch, kBatch}, kIn, kClasses, 32);
  RefOptimizer ref_opt{.kind = RefOptimizer::kAdam, .lr = 1e-3};
  for (const Batch& b : batches) reference_step(init.ref, ref_opt, b.x, b.y, b.size);

  Sequential model = mlp(kIn, kHidden, kClasses);
  assign_all(model, init.tensors);
  model.compile({.optimizer = optimizers::Adam(), .loss = losses::CategoricalCrossentropy()});
  model.fit(dataset_of(batches, kIn, kClasses).batch(kBatch), {.epochs = 1, .verbose = 0});
  EXPECT_EQ(model.optimizer().iterations(), 5);
  Comparison c = compare(model, init.ref);
  EXPECT_LE(c.norm, 1e-5);
  EXPECT_LE(c.elementwise, 1e-4);  // Adam: see check_five_steps
}

// Keras reports an epoch's loss as the running mean over examples, so a short last batch weighs
// by its size: 10 examples in batches of 4, 4, 2.
TEST(TrainingNumerics, EpochLossWeighsThePartialLastBatchByItsSize) {
  constexpr int64_t in = 6, hidden = 5, classes = 3;
  Init init = random_init(in, hidden, classes, 41);
  std::vector<Batch> batches = random_batches({4, 4, 2}, in, classes, 42);
  RefOptimizer ref_opt{.kind = RefOptimizer::kSgdMomentum, .lr = 0.5};
  double weighted = 0, unweighted = 0;
  for (const Batch& b : batches) {
    double loss = reference_step(init.ref, ref_opt, b.x, b.y, b.size);
    weighted += loss * static_cast<double>(b.size) / 10.0;
    unweighted += loss / 3.0;
  }
  // The data makes the two averages distinguishable at the tolerance used below.
  ASSERT_GT(relative(unweighted, weighted), 1e-3);

  Sequential model = mlp(in, hidden, classes);
  assign_all(model, init.tensors);
  model.compile({.optimizer = optimizers::SGD({.learning_rate = 0.5, .momentum = 0.9}),
                 .loss = losses::CategoricalCrossentropy()});
  callbacks::History h =
      model.fit(dataset_of(batches, in, classes).batch(4), {.epochs = 1, .verbose = 0});
  ASSERT_EQ(h.history.at("loss").size(), 1u);
  EXPECT_NEAR(h.history.at("loss")[0], weighted, 1e-5 * weighted)
      << "unweighted mean of the batch losses: " << unweighted;
  EXPECT_LE(compare(model, init.ref).elementwise, 1e-5);
}

TEST(TrainingNumerics, CrossEntropyOfAZeroProbabilityIsClippedToMinusLogEpsilon) {
  Tensor y = Tensor::from_vector<float>({1, 0, 0}, {1, 3});
  Tensor p = Tensor::from_vector<float>({0, 1, 0}, {1, 3});
  Tensor loss = losses::CategoricalCrossentropy().call(y, p);
  ASSERT_EQ(loss.num_elements(), 1);
  EXPECT_NEAR(loss.at(0), -std::log(1e-7), 1e-5 * -std::log(1e-7));
}

// Example A's softmax output for its true class underflows to exactly 0; example B is ordinary.
// On the probabilities themselves (a copy, as predict returns) the loss clips: A's loss is
// -log(1e-7) and it adds no gradient (the float64 reference, where the probability is 1e-87, also
// clips). In training the loss takes the softmax's own output, so — as in Keras (_keras_logits) —
// it is computed from the logits: A's loss is the logit gap, 200, and A's gradient is not lost.
TEST(TrainingNumerics, ProbabilitiesClipButTrainingTakesTheSoftmaxLogits) {
  Sequential model = mlp(2, 2, 2);
  RefMlp ref{2, 2, 2, {1, 0, 0, 1}, {0, 0}, {-100, 0, 0.3, -0.2}, {0, 0}};
  std::vector<Tensor> values;
  for (Vec* p : ref.params())
    values.push_back(Tensor::from_vector(std::vector<float>(p->begin(), p->end()),
                                         {static_cast<int64_t>(p->size())}));
  values[0] = values[0].reshape({2, 2});
  values[2] = values[2].reshape({2, 2});
  assign_all(model, values);
  model.compile({.optimizer = optimizers::SGD({.learning_rate = 0.1}),
                 .loss = losses::CategoricalCrossentropy()});

  // A: x = [2, -1] -> h = [2, 0] -> logits [-200, 0]; true class 0.
  // B: x = [-1, 1] -> h = [0, 1] -> logits [0.3, -0.2]; true class 1.
  std::vector<float> x = {2, -1, -1, 1}, y = {1, 0, 0, 1};
  Tensor probs = model.predict(Tensor::from_vector(x, {2, 2}));
  ASSERT_EQ(probs.at(0), 0.0f) << "the test needs an exact 0: " << probs.to_string();

  Tensor per_example =
      losses::CategoricalCrossentropy().call(Tensor::from_vector(y, {2, 2}), probs);
  EXPECT_NEAR(per_example.at(0), -std::log(1e-7), 1e-5 * -std::log(1e-7));

  RefResult r = reference_forward_backward(ref, x, y, 2);
  ASSERT_NEAR(r.per_example_loss[0], -std::log(1e-7), 1e-12);
  RefResult only_b = reference_forward_backward(ref, {x[2], x[3]}, {y[2], y[3]}, 1);
  for (size_t k = 0; k < r.grads.size(); ++k)
    for (size_t i = 0; i < r.grads[k].size(); ++i)
      ASSERT_NEAR(r.grads[k][i], only_b.grads[k][i] / 2, 1e-15) << "reference: A adds no gradient";

  RefResult from_logits = reference_forward_backward(ref, x, y, 2, /*from_logits=*/true);
  ASSERT_NEAR(from_logits.per_example_loss[0], 200.0, 1e-9);
  RefOptimizer sgd{.kind = RefOptimizer::kSgdMomentum, .lr = 0.1, .momentum = 0.0};
  double want = reference_step(ref, sgd, x, y, 2);
  auto logs = model.train_on_batch(Tensor::from_vector(x, {2, 2}), Tensor::from_vector(y, {2, 2}));
  EXPECT_NEAR(logs.at("loss"), want, 1e-5 * want);
  EXPECT_GT(logs.at("loss"), 100.0);  // not the clipped (16.1 + B's) / 2
  EXPECT_LE(compare(model, ref).elementwise, 1e-5);
}

}  // namespace
}  // namespace lockstep::keras
