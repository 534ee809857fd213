// Tests of the tape's bookkeeping with two tiny ops defined here, so that the tape is checked
// independently of the ops layer: scale(x, c) = c*x and mul(x, z) = x*z (elementwise, float64).
#include "lockstep/autodiff/gradient_tape.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
