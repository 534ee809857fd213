// Every oneDNN-backed op (matmul, linear, unary eltwise, softmax, log_softmax, cast) against a
// naive float64 loop written here. Error is normwise: max|got − ref| / max|ref|; float32 must be
// within 1e-5 and bfloat16 within 1e-2. Sizes are not multiples of 8 or 16.
#include <cmath>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "lockstep/core/random.h"
#include "lockstep/ops.h"

namespace lockstep {
namespace {

// Random values, already representable in `dtype`, returned as float64 (for the reference) and
// as `dtype` (for the op).
struct Input {
  std::vector<double> ref;
  Tensor t;
};
Input make_input(Generator& gen, const Shape& shape, DType dtype, double lo = -1, double hi = 1) {
  Tensor t = gen.uniform(shape, lo, hi, dtype);
  return {t.to_vector<double>(), t};
}

double rel_error(const Tensor& got, const std::vector<double>& ref) {
  EXPECT_EQ(got.num_elements(), static_cast<int64_t>(ref.size()));
  std::vector<double> g = got.to_vector<double>();
  double err = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::abs(g[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return scale == 0 ? err : err / scale;
}

double tolerance(DType d) {
  return d == DType::bfloat16 ? 1e-2 : 1e-5;
}

std::vector<double> ref_matmul(const std::vector<double>& a, const std::vector<double>& b,
                               int64_t m, int64_t k, int64_t n, bool ta, bool tb) {
  std::vector<double> y(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        double av = ta ? a[static_cast<size_t>(p * m + i)] : a[static_cast<size_t>(i * k + p)];
        double bv = tb ? b[static_cast<size_t>(j * k + p)] : b[static_cast<size_t>(p * n + j)];
        s += av * bv;
      }
      y[static_cast<size_t>(i * n + j)] = s;
    }
  return y;
}

double ref_act(ops::FusedActivation act, double z) {
  switch (act) {
    case ops::FusedActivation::relu:
      return z > 0 ? z : 0;
    case ops::FusedActivation::sigmoid:
      return 1 / (1 + std::exp(-z));
    case ops::FusedActivation::tanh:
      return std::tanh(z);
    case ops::FusedActivation::gelu:
      return 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
    case ops::FusedActivation::none:
      break;
  }
  return z;
}

class OneDnnOps : public ::testing::TestWithParam<DType> {
 protected:
  Generator gen{11};
};

TEST_P(OneDnnOps, MatmulMatchesNaiveLoopForAllTransposes) {
  const DType dt = GetParam();
  const int64_t m = 33, k = 17, n = 7;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Input a = make_input(gen, ta ? Shape{k, m} : Shape{m, k}, dt);
      Input b = make_input(gen, tb ? Shape{n, k} : Shape{k, n}, dt);
      Tensor y = ops::matmul_forward(a.t, b.t, ta, tb);
      EXPECT_EQ(y.dtype(), dt);
      EXPECT_EQ(y.shape(), (Shape{m, n}));
      EXPECT_LT(rel_error(y, ref_matmul(a.ref, b.ref, m, k, n, ta, tb)), tolerance(dt))
          << "ta=" << ta << " tb=" << tb;
    }
  }
}

// The weight gradient of the seed model's first layer, xᵀ·dz, at full size: float32 products with
// a transposed left operand take their own kernel (sgemm), checked here against float64 loops.
TEST(OneDnnOpsFloat32, TheSeedModelsWeightGradientShapeMatchesNaiveLoops) {
  Generator g(11);
  const int64_t batch = 128, in = 784, out = 128;
  Input x = make_input(g, {batch, in}, DType::float32);
  Input dz = make_input(g, {batch, out}, DType::float32);
  Tensor dk = ops::matmul_forward(x.t, dz.t, true, false);
  EXPECT_EQ(dk.shape(), (Shape{in, out}));
  EXPECT_LT(rel_error(dk, ref_matmul(x.ref, dz.ref, in, batch, out, true, false)),
            tolerance(DType::float32));
}

TEST_P(OneDnnOps, MatmulBackwardMatchesNaiveLoops) {
  const DType dt = GetParam();
  const int64_t m = 13, k = 7, n = 9;
  Input a = make_input(gen, {m, k}, dt), b = make_input(gen, {n, k}, dt);
  Input dy = make_input(gen, {m, n}, dt);
  ops::MatmulGrads g = ops::matmul_backward(dy.t, a.t, b.t, false, true);
  // y = a·bᵀ: da = dy·b, db = dyᵀ·a.
  EXPECT_LT(rel_error(g.da, ref_matmul(dy.ref, b.ref, m, n, k, false, false)), tolerance(dt));
  EXPECT_LT(rel_error(g.db, ref_matmul(dy.ref, a.ref, n, m, k, true, false)), tolerance(dt));
}

TEST_P(OneDnnOps, LinearWithEachFusedActivationMatchesNaiveLoop) {
  const DType dt = GetParam();
  const int64_t batch = 33, in = 17, out = 13;
  for (ops::FusedActivation act :
       {ops::FusedActivation::none, ops::FusedActivation::relu, ops::FusedActivation::sigmoid,
        ops::FusedActivation::tanh, ops::FusedActivation::gelu}) {
    Input x = make_input(gen, {batch, in}, dt), w = make_input(gen, {in, out}, dt);
    Input b = make_input(gen, {out}, dt);
    Tensor y = ops::linear_forward(x.t, w.t, b.t, act);
    std::vector<double> ref = ref_matmul(x.ref, w.ref, batch, in, out, false, false);
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t j = 0; j < out; ++j) {
        double& r = ref[static_cast<size_t>(i * out + j)];
        r = ref_act(act, r + b.ref[static_cast<size_t>(j)]);
      }
    EXPECT_LT(rel_error(y, ref), tolerance(dt)) << ops::activation_name(act);
  }
}

TEST_P(OneDnnOps, LinearBackwardMatchesNaiveLoops) {
  const DType dt = GetParam();
  const int64_t batch = 19, in = 11, out = 7;
  Input x = make_input(gen, {batch, in}, dt), w = make_input(gen, {in, out}, dt);
  Input b = make_input(gen, {out}, dt), dy = make_input(gen, {batch, out}, dt);
  Tensor y = ops::linear_forward(x.t, w.t, b.t, ops::FusedActivation::relu);
  std::vector<double> yv = y.to_vector<double>();
  ops::LinearGrads g = ops::linear_backward(dy.t, x.t, w.t, y, ops::FusedActivation::relu);
  std::vector<double> dz(dy.ref);
  for (size_t i = 0; i < dz.size(); ++i) dz[i] = yv[i] > 0 ? dz[i] : 0.0;
  std::vector<double> db(static_cast<size_t>(out), 0.0);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t j = 0; j < out; ++j)
      db[static_cast<size_t>(j)] += dz[static_cast<size_t>(i * out + j)];
  EXPECT_LT(rel_error(g.dkernel, ref_matmul(x.ref, dz, in, batch, out, true, false)),
            tolerance(dt));
  EXPECT_LT(rel_error(g.dbias, db), tolerance(dt));
  EXPECT_LT(rel_error(g.dx, ref_matmul(dz, w.ref, batch, out, in, false, true)), tolerance(dt));
}

TEST_P(OneDnnOps, UnaryEltwiseMatchesNaiveLoop) {
  const DType dt = GetParam();
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> op;
    std::function<double(double)> ref;
    double lo, hi;
  };
  std::vector<Case> cases = {
      {"neg", [](const Tensor& x) { return ops::neg_forward(x); }, [](double v) { return -v; }, -2,
       2},
      {"exp", [](const Tensor& x) { return ops::exp_forward(x); },
       [](double v) { return std::exp(v); }, -2, 2},
      {"log", [](const Tensor& x) { return ops::log_forward(x); },
       [](double v) { return std::log(v); }, 0.1, 3},
      {"sqrt", [](const Tensor& x) { return ops::sqrt_forward(x); },
       [](double v) { return std::sqrt(v); }, 0.1, 3},
      {"square", [](const Tensor& x) { return ops::square_forward(x); },
       [](double v) { return v * v; }, -2, 2},
      {"relu", [](const Tensor& x) { return ops::relu_forward(x); },
       [](double v) { return v > 0 ? v : 0; }, -2, 2},
      {"sigmoid", [](const Tensor& x) { return ops::sigmoid_forward(x); },
       [](double v) { return ref_act(ops::FusedActivation::sigmoid, v); }, -4, 4},
      {"tanh", [](const Tensor& x) { return ops::tanh_forward(x); },
       [](double v) { return std::tanh(v); }, -3, 3},
      {"gelu", [](const Tensor& x) { return ops::gelu_forward(x); },
       [](double v) { return ref_act(ops::FusedActivation::gelu, v); }, -3, 3},
  };
  for (const Case& c : cases) {
    Input x = make_input(gen, {7, 13}, dt, c.lo, c.hi);
    std::vector<double> ref(x.ref.size());
    for (size_t i = 0; i < ref.size(); ++i) ref[i] = c.ref(x.ref[i]);
    Tensor y = c.op(x.t);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_LT(rel_error(y, ref), tolerance(dt)) << c.name;
  }
}

TEST_P(OneDnnOps, SoftmaxAndLogSoftmaxMatchNaiveLoopAlongEachAxis) {
  const DType dt = GetParam();
  const Shape shape{5, 13, 7};
  Input x = make_input(gen, shape, dt, -3, 3);
  for (int axis = 0; axis < 3; ++axis) {
    int64_t outer = 1, n = shape[axis], inner = 1;
    for (int d = 0; d < axis; ++d) outer *= shape[d];
    for (int d = axis + 1; d < 3; ++d) inner *= shape[d];
    std::vector<double> sm(x.ref.size()), lsm(x.ref.size());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t q = 0; q < inner; ++q) {
        auto idx = [&](int64_t i) { return static_cast<size_t>((o * n + i) * inner + q); };
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) sum += std::exp(x.ref[idx(i)]);
        for (int64_t i = 0; i < n; ++i) {
          sm[idx(i)] = std::exp(x.ref[idx(i)]) / sum;
          lsm[idx(i)] = x.ref[idx(i)] - std::log(sum);
        }
      }
    EXPECT_LT(rel_error(ops::softmax_forward(x.t, axis), sm), tolerance(dt)) << "axis " << axis;
    EXPECT_LT(rel_error(ops::log_softmax_forward(x.t, axis), lsm), tolerance(dt))
        << "axis " << axis;
  }
}

INSTANTIATE_TEST_SUITE_P(Float32AndBfloat16, OneDnnOps,
                         ::testing::Values(DType::float32, DType::bfloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(OneDnnOps, Bfloat16MatmulCanWriteFloat32) {
  Generator gen(5);
  Input a = make_input(gen, {13, 7}, DType::bfloat16), b = make_input(gen, {7, 9}, DType::bfloat16);
  Tensor y(Shape{13, 9}, DType::float32);
  ops::matmul_into(a.t, b.t, y);
  // Inputs are exact in bf16 and accumulation is float32: float32 accuracy is expected.
  EXPECT_LT(rel_error(y, ref_matmul(a.ref, b.ref, 13, 7, 9, false, false)), 1e-5);
}

TEST(OneDnnOps, CastRoundsToNearestEvenBothWays) {
  // 1 + 2^-8 is halfway between two bf16 values (1 and 1 + 2^-7): ties to even gives 1.
  // 1 + 3·2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even gives 1 + 2^-6.
  std::vector<float> v = {1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f, 3.0e38f, 1e-3f, 0.0f};
  std::vector<double> expected = {1.0, 1.0, 1.0 + 0x1p-6, -2.5, 0, 0, 0.0};
  Tensor x = Tensor::from_vector<float>(v, {7});
  Tensor b = ops::cast_forward(x, DType::bfloat16);
  ASSERT_EQ(b.dtype(), DType::bfloat16);
  std::vector<double> got = b.to_vector<double>();
  for (int i : {0, 1, 2, 3, 6})
    EXPECT_EQ(got[static_cast<size_t>(i)], expected[static_cast<size_t>(i)]);
  EXPECT_NEAR(got[4], 3.0e38, 3.0e38 * 4e-3);
  EXPECT_NEAR(got[5], 1e-3, 1e-3 * 4e-3);
  Tensor back = ops::cast_forward(b, DType::float32);
  ASSERT_EQ(back.dtype(), DType::float32);
  EXPECT_EQ(back.to_vector<double>(), got);  // bf16 -> f32 is exact
}

}  // namespace
}  // namespace lockstep
