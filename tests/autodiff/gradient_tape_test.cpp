// Tests of the tape's bookkeeping with two tiny ops defined here, so that the tape is checked
// independently of the ops layer: scale(x, c) = c*x and mul(x, z) = x*z (elementwise, float64).
#include "lockstep/autodiff/gradient_tape.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

namespace lockstep {
namespace {

using ::testing::ElementsAre;

Tensor vec(std::vector<double> v) {
  int64_t n = static_cast<int64_t>(v.size());
  return Tensor::from_vector<double>(v, {n});
}
std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

Tensor scale(const Tensor& x, double c) {
  Tensor y(x.shape(), DType::float64);
  for (int64_t i = 0; i < x.num_elements(); ++i) y.data<double>()[i] = c * x.data<double>()[i];
  if (autodiff::should_record({&x})) {
    autodiff::record("scale", {x}, {y}, [c](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{scale(g[0], c)};
    });
  }
  return y;
}

Tensor mul(const Tensor& x, const Tensor& z) {
  Tensor y(x.shape(), DType::float64);
  for (int64_t i = 0; i < x.num_elements(); ++i)
    y.data<double>()[i] = x.data<double>()[i] * z.data<double>()[i];
  if (autodiff::should_record({&x, &z})) {
    autodiff::record("mul", {x, z}, {y}, [x, z](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{mul(g[0], z), mul(g[0], x)};
    });
  }
  return y;
}

TEST(GradientTape, ChainRuleThroughRecordedOps) {
  Tensor x = vec({1, 2, 3});
  GradientTape tape;
  tape.watch(x);
  Tensor y = scale(mul(x, x), 3.0);  // y = 3x^2, dy/dx = 6x
  auto g = tape.gradient(y, std::vector<Tensor>{x});
  EXPECT_THAT(values(g[0]), ElementsAre(6, 12, 18));
}

TEST(GradientTape, AccumulatesWhereATensorFeedsSeveralOps) {
  Tensor x = vec({2, -1});
  GradientTape tape;
  tape.watch(x);
  Tensor a = scale(x, 2.0);
  Tensor y = mul(a, scale(x, 5.0));  // 10x^2 -> 20x
  auto g = tape.gradient(y, std::vector<Tensor>{x});
  EXPECT_THAT(values(g[0]), ElementsAre(40, -20));
}

TEST(GradientTape, OutputGradientSeedsTheTarget) {
  Tensor x = vec({1, 1});
  GradientTape tape;
  tape.watch(x);
  Tensor y = scale(x, 4.0);
  auto g = tape.gradient(y, std::vector<Tensor>{x}, vec({0.5, -2}));
  EXPECT_THAT(values(g[0]), ElementsAre(2, -8));
}

TEST(GradientTape, UnconnectedAndUnwatchedSourcesGetNoGradient) {
  Tensor x = vec({1}), other = vec({5});
  GradientTape tape;
  tape.watch(x);
  tape.watch(other);
  Tensor unwatched = vec({3});
  Tensor y = mul(x, unwatched);
  auto g = tape.gradient(y, std::vector<Tensor>{x, other, unwatched});
  EXPECT_THAT(values(g[0]), ElementsAre(3));
  EXPECT_FALSE(g[1].defined());
  EXPECT_FALSE(g[2].defined());
}

TEST(GradientTape, NonPersistentTapeRefusesASecondGradient) {
  Tensor x = vec({1});
  GradientTape tape;
  tape.watch(x);
  Tensor y = scale(x, 2);
  tape.gradient(y, std::vector<Tensor>{x});
  EXPECT_THROW(tape.gradient(y, std::vector<Tensor>{x}), FailedPrecondition);
}

TEST(GradientTape, PersistentTapeGivesSeveralGradients) {
  Tensor x = vec({3});
  GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  Tensor y = mul(x, x);
  Tensor z = scale(y, 2);
  EXPECT_THAT(values(tape.gradient(y, std::vector<Tensor>{x})[0]), ElementsAre(6));
  EXPECT_THAT(values(tape.gradient(z, std::vector<Tensor>{x})[0]), ElementsAre(12));
}

TEST(GradientTape, StopGradientCutsTheChain) {
  Tensor x = vec({2});
  GradientTape tape;
  tape.watch(x);
  Tensor y = mul(x, stop_gradient(x));  // d/dx treats the second factor as a constant
  EXPECT_THAT(values(tape.gradient(y, std::vector<Tensor>{x})[0]), ElementsAre(2));
}

TEST(GradientTape, WatchesTrainableVariablesWhenRead) {
  Variable w(vec({1.5}), "w");
  Variable frozen(vec({2}), "frozen", /*trainable=*/false);
  GradientTape tape;
  Tensor y = mul(w.value(), frozen.value());
  auto g = tape.gradient(y, std::vector<Variable>{w, frozen});
  EXPECT_THAT(values(g[0]), ElementsAre(2));
  EXPECT_FALSE(g[1].defined());
}

TEST(GradientTape, StopRecordingPausesTheTape) {
  Tensor x = vec({1});
  GradientTape tape;
  tape.watch(x);
  Tensor y;
  {
    GradientTape::StopRecording pause(tape);
    y = scale(x, 7);
  }
  EXPECT_FALSE(tape.gradient(y, std::vector<Tensor>{x})[0].defined());
}

TEST(GradientTape, NestedTapesEachSeeOpsRunWhileTheyLive) {
  Tensor x = vec({1});
  GradientTape outer;
  outer.watch(x);
  Tensor a = scale(x, 2);
  Tensor b;
  {
    GradientTape inner;
    inner.watch(a);
    b = scale(a, 3);
    EXPECT_THAT(values(inner.gradient(b, std::vector<Tensor>{a})[0]), ElementsAre(3));
  }
  EXPECT_THAT(values(outer.gradient(b, std::vector<Tensor>{x})[0]), ElementsAre(6));
}

// scale(x, c) that honours the tape's sink: writes its gradient into it when given one.
Tensor scale_into(const Tensor& x, double c, int* sinks_used = nullptr) {
  Tensor y = scale(x, 1.0);
  for (int64_t i = 0; i < x.num_elements(); ++i) y.data<double>()[i] = c * x.data<double>()[i];
  if (autodiff::should_record({&x})) {
    autodiff::record(
        "scale_into", {x}, {y},
        [c, sinks_used](const std::vector<Tensor>& g, const std::vector<Tensor>& sink) {
          Tensor out = sink[0].defined() ? sink[0] : Tensor(g[0].shape(), g[0].dtype());
          if (sink[0].defined() && sinks_used) ++*sinks_used;
          for (int64_t i = 0; i < out.num_elements(); ++i)
            out.data<double>()[i] = c * g[0].data<double>()[i];
          return std::vector<Tensor>{out};
        });
  }
  return y;
}

// mul(x, z) whose backward writes into every sink it is given (to check the tape gives the same
// buffer to one input only).
Tensor mul_into(const Tensor& x, const Tensor& z) {
  Tensor y = mul(x, z);
  if (autodiff::should_record({&x, &z})) {
    autodiff::record("mul_into", {x, z}, {y},
                     [x, z](const std::vector<Tensor>& g, const std::vector<Tensor>& sink) {
                       std::vector<Tensor> out{mul(g[0], z), mul(g[0], x)};
                       for (size_t k = 0; k < 2; ++k) {
                         if (!sink[k].defined()) continue;
                         std::memcpy(sink[k].raw_data(), out[k].raw_data(), out[k].nbytes());
                         out[k] = sink[k];
                       }
                       return out;
                     });
  }
  return y;
}

TEST(GradientTapeDestinations, AnOpThatTakesTheSinkWritesTheGradientInPlace) {
  Tensor x = vec({1, -2, 3});
  Tensor dest = vec({9, 9, 9});
  int used = 0;
  GradientTape tape;
  tape.watch(x);
  Tensor y = scale_into(x, 4.0, &used);
  auto g = tape.gradient(y, std::vector<Tensor>{x}, std::vector<Tensor>{dest});
  EXPECT_EQ(used, 1);
  EXPECT_EQ(g[0].raw_data(), dest.raw_data());
  EXPECT_THAT(values(dest), ElementsAre(4, 4, 4));
}

TEST(GradientTapeDestinations, OtherOpsGradientsAreCopiedIn) {
  Tensor x = vec({1, 2});
  Tensor dest = vec({0, 0});
  GradientTape tape;
  tape.watch(x);
  Tensor y = scale(mul(x, x), 3.0);  // 6x
  auto g = tape.gradient(y, std::vector<Tensor>{x}, std::vector<Tensor>{dest});
  EXPECT_EQ(g[0].raw_data(), dest.raw_data());
  EXPECT_THAT(values(dest), ElementsAre(6, 12));
}

TEST(GradientTapeDestinations, SeveralContributionsAreSummedInTheDestinationAsWithout) {
  // x feeds three ops, two of which take sinks: the destination must end up with the same sum
  // (bit for bit) as the tape computes without destinations, and equal to the closed form.
  Tensor x = vec({0.3, -1.7, 2.9});
  auto f = [&x] {
    Tensor a = scale_into(x, 0.1);
    Tensor b = scale(x, 7.3);
    Tensor c = scale_into(x, -2.2);
    return mul(mul(a, b), c);  // y = 0.1*7.3*(-2.2) x^3
  };
  std::vector<Tensor> reference;
  {
    GradientTape tape;
    tape.watch(x);
    reference = tape.gradient(f(), std::vector<Tensor>{x});
  }
  Tensor dest = vec({5, 5, 5});
  GradientTape tape;
  tape.watch(x);
  auto g = tape.gradient(f(), std::vector<Tensor>{x}, std::vector<Tensor>{dest});
  EXPECT_EQ(g[0].raw_data(), dest.raw_data());
  EXPECT_EQ(values(dest), values(reference[0]));
  std::vector<double> xs = values(x);
  for (size_t i = 0; i < xs.size(); ++i)
    EXPECT_NEAR(values(dest)[i], 3 * 0.1 * 7.3 * -2.2 * xs[i] * xs[i], 1e-12);
}

TEST(GradientTapeDestinations, ATensorTwiceInOneOpGetsTheSinkOnce) {
  Tensor x = vec({1.5, -2});
  Tensor dest = vec({0, 0});
  GradientTape tape;
  tape.watch(x);
  Tensor y = mul_into(x, x);  // x^2 -> 2x, from two contributions
  auto g = tape.gradient(y, std::vector<Tensor>{x}, std::vector<Tensor>{dest});
  EXPECT_EQ(g[0].raw_data(), dest.raw_data());
  EXPECT_THAT(values(dest), ElementsAre(3, -4));
}

TEST(GradientTapeDestinations, MixesSourcesWithAndWithoutDestinationsAndLeavesUnusedOnesAlone) {
  Tensor x = vec({1, 2}), z = vec({3, 4}), unused = vec({7, 7});
  Tensor dx = vec({0, 0}), dunused = vec({-1, -1});
  GradientTape tape;
  tape.watch(x);
  tape.watch(z);
  tape.watch(unused);
  Tensor y = mul_into(x, z);
  auto g = tape.gradient(y, std::vector<Tensor>{x, z, unused},
                         std::vector<Tensor>{dx, Tensor(), dunused});
  EXPECT_EQ(g[0].raw_data(), dx.raw_data());
  EXPECT_THAT(values(dx), ElementsAre(3, 4));
  EXPECT_THAT(values(g[1]), ElementsAre(1, 2));
  EXPECT_FALSE(g[2].defined());
  EXPECT_THAT(values(dunused), ElementsAre(-1, -1));
}

TEST(GradientTapeDestinations, RejectsAWrongCountOrShape) {
  Tensor x = vec({1, 2});
  {
    GradientTape tape;
    tape.watch(x);
    Tensor y = scale(x, 2.0);
    EXPECT_THROW(tape.gradient(y, std::vector<Tensor>{x}, std::vector<Tensor>{vec({0}), vec({0})}),
                 InvalidArgument);
  }
  GradientTape tape;
  tape.watch(x);
  Tensor y = scale(x, 2.0);
  EXPECT_THROW(tape.gradient(y, std::vector<Tensor>{x}, std::vector<Tensor>{vec({0, 0, 0})}),
               InvalidArgument);
}

TEST(Variable, AssignKeepsIdentityAndChecksShape) {
  Variable v(vec({1, 2}), "v");
  uint64_t id = v.raw_value().id();
  v.assign_add(vec({1, 1}));
  v.assign_sub(vec({0.5, 0.5}));
  EXPECT_THAT(values(v.raw_value()), ElementsAre(1.5, 2.5));
  EXPECT_EQ(v.raw_value().id(), id);
  try {
    v.assign(vec({1, 2, 3}));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("float64[2]"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("float64[3]"));
  }
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

TEST(GradientTapeReadyCallback, ReportsEachSourceOnceWhenItsGradientIsFinal) {
  // Elementwise: a = w1 x, b = (a w2) w2 (w2 is read by two ops), y = b w3; `unused` is read
  // by no op.
  Tensor x = vec({1.5, -2.0}), w1 = vec({0.5, 3.0}), w2 = vec({-1.25, 2.0}), w3 = vec({4.0, 0.75}),
         unused = vec({9.0, 9.0});
  GradientTape tape;
  for (const Tensor* t : {&w1, &w2, &w3, &unused}) tape.watch(*t);
  Tensor a = mul(w1, x);
  Tensor b = mul(mul(a, w2), w2);
  Tensor y = mul(b, w3);
  std::vector<Tensor> sources = {w1, w2, w3, unused};
  std::vector<Tensor> dests = {vec({0, 0}), vec({0, 0}), vec({0, 0}), vec({0, 0})};
  std::vector<size_t> order;
  std::vector<std::vector<double>> at_report(4);
  tape.set_gradient_ready_callback([&](size_t i, const Tensor& grad) {
    order.push_back(i);
    at_report[i] = values(dests[i]);  // what a bucket all-reduce would ship at this moment
    EXPECT_EQ(grad.defined(), i != 3);
    if (grad.defined()) {
      EXPECT_EQ(grad.raw_data(), dests[i].raw_data());
    }
  });
  auto g = tape.gradient(y, sources, dests);
  // Reverse order of first use; w2 only after both of its readers; the unused source last.
  EXPECT_THAT(order, ElementsAre(2, 1, 0, 3));
  // Closed forms: dy/dw3 = b, dy/dw2 = 2 w2 a w3, dy/dw1 = x w2^2 w3.
  std::vector<double> xs = values(x), v1 = values(w1), v2 = values(w2), v3 = values(w3);
  for (size_t k = 0; k < 2; ++k) {
    const double av = v1[k] * xs[k];
    EXPECT_DOUBLE_EQ(at_report[2][k], av * v2[k] * v2[k]);
    EXPECT_DOUBLE_EQ(at_report[1][k], 2 * v2[k] * av * v3[k]);
    EXPECT_DOUBLE_EQ(at_report[0][k], xs[k] * v2[k] * v2[k] * v3[k]);
  }
  // The values at report time are the final ones; the unused source has no gradient.
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(values(g[i]), at_report[i]) << "source " << i;
  EXPECT_FALSE(g[3].defined());
  EXPECT_THAT(at_report[3], ElementsAre(0, 0));  // its destination untouched
}

TEST(GradientTapeReadyCallback, WorksWithoutDestinations) {
  Tensor x = vec({1.0, 2.0}), w = vec({3.0, -1.0});
  GradientTape tape;
  tape.watch(w);
  Tensor y = mul(mul(w, x), w);  // w^2 x: dy/dw = 2 w x
  int calls = 0;
  tape.set_gradient_ready_callback([&](size_t i, const Tensor& grad) {
    EXPECT_EQ(i, 0u);
    EXPECT_THAT(values(grad), ElementsAre(6.0, -4.0));
    ++calls;
  });
  auto g = tape.gradient(y, std::vector<Tensor>{w});
  EXPECT_EQ(calls, 1);
  EXPECT_THAT(values(g[0]), ElementsAre(6.0, -4.0));
}

}  // namespace
}  // namespace lockstep
