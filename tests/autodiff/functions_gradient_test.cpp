// Every differentiable op's gradient against float64 central differences (the shared checker),
// with odd sizes (not multiples of 8 or 16) and broadcasting cases.
#include <gtest/gtest.h>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/losses.h"
#include "lockstep/ops/activations.h"
#include "testing/gradient_check.h"

namespace lockstep {
namespace {

using testing::gradients_match;
using testing::random_f64;
using V = std::vector<Tensor>;

class Gradients : public ::testing::Test {
 protected:
  Tensor rnd(const Shape& s, double lo = -1, double hi = 1) { return random_f64(gen, s, lo, hi); }
  // Values with |v| in [0.1, 1] and random signs: away from relu's kink and from zero.
  Tensor away_from_zero(const Shape& s) {
    Tensor t = rnd(s, 0.1, 1.0);
    for (int64_t i = 0; i < t.num_elements(); ++i)
      if (gen.uniform() < 0.5) t.data<double>()[i] *= -1;
    return t;
  }
  Generator gen{7};
};

TEST_F(Gradients, MatmulAllTransposes) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = rnd(ta ? Shape{13, 7} : Shape{7, 13});
      Tensor b = rnd(tb ? Shape{5, 13} : Shape{13, 5});
      EXPECT_TRUE(gradients_match([=](const V& x) { return matmul(x[0], x[1], ta, tb); }, {a, b}))
          << "transpose_a=" << ta << " transpose_b=" << tb;
    }
  }
}

TEST_F(Gradients, LinearWithEachActivation) {
  for (ops::FusedActivation act :
       {ops::FusedActivation::none, ops::FusedActivation::relu, ops::FusedActivation::sigmoid,
        ops::FusedActivation::tanh, ops::FusedActivation::gelu}) {
    Tensor x = away_from_zero({9, 11}), k = rnd({11, 7}), b = rnd({7});
    EXPECT_TRUE(
        gradients_match([=](const V& v) { return linear(v[0], v[1], v[2], act); }, {x, k, b}))
        << ops::activation_name(act);
  }
}

TEST_F(Gradients, LinearWithoutBias) {
  EXPECT_TRUE(gradients_match(
      [](const V& v) { return linear(v[0], v[1], Tensor(), ops::FusedActivation::tanh); },
      {rnd({5, 3}), rnd({3, 9})}));
}

TEST_F(Gradients, BiasAdd) {
  EXPECT_TRUE(
      gradients_match([](const V& v) { return bias_add(v[0], v[1]); }, {rnd({3, 5, 7}), rnd({7})}));
}

TEST_F(Gradients, BinaryOpsSameShapeAndBroadcast) {
  std::vector<std::pair<Shape, Shape>> cases = {
      {{7, 13}, {7, 13}}, {{7, 13}, {13}}, {{7, 1}, {1, 13}}, {{3, 1, 5}, {4, 1}}, {{}, {3, 5}}};
  for (auto [sa, sb] : cases) {
    Tensor a = rnd(sa), b = rnd(sb, 0.5, 2.0);  // b away from zero for div
    EXPECT_TRUE(gradients_match([](const V& v) { return add(v[0], v[1]); }, {a, b}))
        << "add " << sa.to_string() << sb.to_string();
    EXPECT_TRUE(gradients_match([](const V& v) { return sub(v[0], v[1]); }, {a, b}))
        << "sub " << sa.to_string() << sb.to_string();
    EXPECT_TRUE(gradients_match([](const V& v) { return mul(v[0], v[1]); }, {a, b}))
        << "mul " << sa.to_string() << sb.to_string();
    EXPECT_TRUE(gradients_match([](const V& v) { return div(v[0], v[1]); }, {a, b}))
        << "div " << sa.to_string() << sb.to_string();
  }
}

TEST_F(Gradients, UnaryOps) {
  Tensor x = away_from_zero({7, 13});
  Tensor pos = rnd({7, 13}, 0.2, 3.0);
  EXPECT_TRUE(gradients_match([](const V& v) { return neg(v[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](const V& v) { return exp(v[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](const V& v) { return log(v[0]); }, {pos}));
  EXPECT_TRUE(gradients_match([](const V& v) { return sqrt(v[0]); }, {pos}));
  EXPECT_TRUE(gradients_match([](const V& v) { return square(v[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](const V& v) { return relu(v[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](const V& v) { return sigmoid(v[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](const V& v) { return tanh(v[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](const V& v) { return gelu(v[0]); }, {x}));
}

TEST_F(Gradients, SoftmaxAndLogSoftmaxAlongEveryAxis) {
  Tensor x = rnd({3, 5, 7}, -2, 2);
  for (int axis : {-1, 0, 1, 2}) {
    EXPECT_TRUE(gradients_match([axis](const V& v) { return softmax(v[0], axis); }, {x}))
        << "softmax axis " << axis;
    EXPECT_TRUE(gradients_match([axis](const V& v) { return log_softmax(v[0], axis); }, {x}))
        << "log_softmax axis " << axis;
  }
}

TEST_F(Gradients, Reductions) {
  Tensor x = rnd({3, 5, 7});
  std::vector<std::vector<int>> axes_cases = {{}, {0}, {-1}, {0, 2}, {1}};
  for (const auto& axes : axes_cases) {
    for (bool keep : {false, true}) {
      EXPECT_TRUE(gradients_match([=](const V& v) { return reduce_sum(v[0], axes, keep); }, {x}));
      EXPECT_TRUE(gradients_match([=](const V& v) { return reduce_mean(v[0], axes, keep); }, {x}));
      EXPECT_TRUE(gradients_match([=](const V& v) { return reduce_max(v[0], axes, keep); }, {x}));
    }
  }
}

TEST_F(Gradients, ShapeOps) {
  Tensor x = rnd({3, 5, 7});
  EXPECT_TRUE(gradients_match([](const V& v) { return reshape(v[0], Shape{15, 7}); }, {x}));
  EXPECT_TRUE(gradients_match([](const V& v) { return flatten(v[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](const V& v) { return transpose(v[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](const V& v) { return transpose(v[0], {1, 0, 2}); }, {x}));
  EXPECT_TRUE(gradients_match(
      [](const V& v) {
        return concat({v[0], v[1], v[2]}, 1);
      },
      {rnd({3, 2, 7}), rnd({3, 5, 7}), rnd({3, 1, 7})}));
  EXPECT_TRUE(gradients_match(
      [](const V& v) {
        return concat({v[0], v[1]}, 0);
      },
      {rnd({2, 7}), rnd({5, 7})}));
  // float64 -> float64 cast is the identity but still a node of the graph.
  EXPECT_TRUE(gradients_match([](const V& v) { return cast(v[0], DType::float64); }, {x}));
}

TEST_F(Gradients, ReshapeIsSeenByTheTape) {
  // A chain through reshape: if reshape did not record, x would get no gradient.
  EXPECT_TRUE(
      gradients_match([](const V& v) { return square(reshape(v[0], Shape{35})); }, {rnd({5, 7})}));
}

TEST_F(Gradients, CategoricalCrossentropyFromProbabilitiesAndLogits) {
  Tensor t = rnd({9, 11}, 0.0, 1.0);   // soft labels: exercises Σ y_true != 1
  Tensor p = rnd({9, 11}, 0.05, 1.0);  // unnormalised: exercises the division by Σ y_pred
  EXPECT_TRUE(gradients_match([t](const V& v) { return categorical_crossentropy(t, v[0]); }, {p}));
  Tensor z = rnd({9, 11}, -3, 3);
  EXPECT_TRUE(gradients_match(
      [t](const V& v) { return categorical_crossentropy(t, v[0], /*from_logits=*/true); }, {z}));
  // Class axis first.
  EXPECT_TRUE(gradients_match(
      [t](const V& v) { return categorical_crossentropy(t, v[0], true, /*axis=*/0); }, {z}));
}

TEST_F(Gradients, SparseCategoricalCrossentropy) {
  std::vector<int64_t> lab = {0, 4, 10, 3, 3, 7, 1, 9, 2};
  Tensor labels = Tensor::from_vector<int64_t>(lab, {9});
  Tensor p = rnd({9, 11}, 0.01, 1.0);
  EXPECT_TRUE(gradients_match(
      [labels](const V& v) { return sparse_categorical_crossentropy(labels, v[0]); }, {p}));
  EXPECT_TRUE(gradients_match(
      [labels](const V& v) { return sparse_categorical_crossentropy(labels, v[0], true); },
      {rnd({9, 11}, -3, 3)}));
}

TEST_F(Gradients, BinaryCrossentropy) {
  Tensor t = rnd({7, 5}, 0.0, 1.0);
  EXPECT_TRUE(gradients_match([t](const V& v) { return binary_crossentropy(t, v[0]); },
                              {rnd({7, 5}, 0.02, 0.98)}));
  EXPECT_TRUE(gradients_match([t](const V& v) { return binary_crossentropy(t, v[0], true); },
                              {rnd({7, 5}, -4, 4)}));
}

TEST_F(Gradients, RegressionLossesInBothArguments) {
  Tensor t = rnd({7, 5}), p = rnd({7, 5});
  EXPECT_TRUE(gradients_match([](const V& v) { return mean_squared_error(v[0], v[1]); }, {t, p}));
  EXPECT_TRUE(gradients_match([](const V& v) { return mean_absolute_error(v[0], v[1]); }, {t, p}));
}

TEST_F(Gradients, ASmallNetworkEndToEnd) {
  // The seed model's shape in miniature: linear+relu, linear, softmax, categorical cross-entropy.
  Tensor x = rnd({6, 13});
  Tensor onehot = one_hot(Tensor::from_vector<int32_t>({0, 2, 1, 4, 3, 2}, {6}), 5, DType::float64);
  auto f = [=](const V& v) {
    Tensor h = linear(x, v[0], v[1], ops::FusedActivation::relu);
    Tensor probs = softmax(linear(h, v[2], v[3]));
    return reduce_mean(categorical_crossentropy(onehot, probs));
  };
  EXPECT_TRUE(gradients_match(f, {rnd({13, 9}), rnd({9}), rnd({9, 5}), rnd({5})}));
}

TEST(LinearGradientDestinations, WriteTheWeightsGradientsIntoOneFlatBufferBitForBit) {
  // The gradient all-reduce's use: every weight's gradient lands in its slice of one float32
  // buffer. Same values as without destinations, including a kernel used by two layers (its
  // gradient is the sum of two contributions).
  Generator gen(11);
  auto f32 = [&gen](const Shape& s) { return random_f64(gen, s).to(DType::float32); };
  Tensor x = f32({6, 13});
  std::vector<Tensor> w{f32({13, 9}), f32({9}), f32({9, 9}), f32({9})};
  auto loss = [&] {
    Tensor h = linear(x, w[0], w[1], ops::FusedActivation::relu);
    Tensor h2 = linear(h, w[2], w[3], ops::FusedActivation::tanh);
    return reduce_sum(linear(h2, w[2], Tensor(), ops::FusedActivation::none));
  };
  std::vector<Tensor> reference;
  {
    GradientTape tape;
    for (const Tensor& t : w) tape.watch(t);
    reference = tape.gradient(loss(), w);
  }
  int64_t total = 0;
  for (const Tensor& t : w) total += t.num_elements();
  Tensor flat = Tensor::full({total}, 123.0f);
  std::vector<Tensor> dest;
  int64_t at = 0;
  for (const Tensor& t : w) {
    dest.push_back(flat.slice(at, at + t.num_elements()).reshape(t.shape()));
    at += t.num_elements();
  }
  GradientTape tape;
  for (const Tensor& t : w) tape.watch(t);
  std::vector<Tensor> g = tape.gradient(loss(), w, dest);
  for (size_t i = 0; i < w.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(g[i].raw_data(), dest[i].raw_data());
    EXPECT_EQ(dest[i].to_vector<float>(), reference[i].to_vector<float>());
  }
}

TEST(GradientChecker, ReportsAWrongGradient) {
  // square's output with the gradient of neg: the checker must catch it and name the element.
  auto wrong = [](const V& v) {
    Tensor y = ops::square_forward(v[0]);
    if (autodiff::should_record({&v[0]})) {
      autodiff::record("wrong", {v[0]}, {y}, [](const V& g) { return V{ops::neg_backward(g[0])}; });
    }
    return y;
  };
  Generator gen(3);
  auto result = gradients_match(wrong, {random_f64(gen, {3, 5}, 0.5, 1.0)});
  EXPECT_FALSE(result);
  EXPECT_NE(std::string(result.message()).find("flat index"), std::string::npos);
}

}  // namespace
}  // namespace lockstep
