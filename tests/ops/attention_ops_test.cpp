// batch_matmul, masked_softmax, gelu_tanh and dot_product_attention against float64 loops written
// here from the definitions, in every dtype, with masks, causal masking and odd sizes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "lockstep/core/random.h"
#include "lockstep/ops/attention.h"
#include "lockstep/ops/batch_matmul.h"
#include "lockstep/ops/gelu.h"
#include "lockstep/ops/masked_softmax.h"
#include "testing/gradient_check.h"

namespace lockstep::ops {
namespace {

using ::testing::HasSubstr;
using testing::random_f64;
using Vec = std::vector<double>;

// max |actual - expected| / max |expected|.
double relative_error(const Tensor& actual, const Vec& expected) {
  Vec a = actual.to_vector<double>();
  EXPECT_EQ(a.size(), expected.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), expected.size()); ++i) {
    diff = std::max(diff, std::abs(a[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  return diff / std::max(scale, 1e-300);
}

double tolerance(DType dtype) {
  return dtype == DType::float32 ? 2e-5 : dtype == DType::bfloat16 ? 2e-2 : 1e-12;
}

// The values a kernel sees: the tensor converted to `dtype` (rounded for bfloat16), as doubles.
Vec seen(const Tensor& t) {
  return t.to_vector<double>();
}

class BatchMatmulTest : public ::testing::TestWithParam<DType> {};

TEST_P(BatchMatmulTest, MatchesLoopsForEveryTransposeCombination) {
  const DType dtype = GetParam();
  Generator gen(11);
  const int64_t B0 = 2, B1 = 3, M = 5, K = 7, N = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = random_f64(gen, ta ? Shape{B0, B1, K, M} : Shape{B0, B1, M, K}).to(dtype);
      Tensor b = random_f64(gen, tb ? Shape{B0, B1, N, K} : Shape{B0, B1, K, N}).to(dtype);
      Vec A = seen(a), Bv = seen(b), expected(static_cast<size_t>(B0 * B1 * M * N));
      for (int64_t i = 0; i < B0 * B1; ++i) {
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t n = 0; n < N; ++n) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k) {
              const double av = ta ? A[static_cast<size_t>(i * K * M + k * M + m)]
                                   : A[static_cast<size_t>(i * M * K + m * K + k)];
              const double bv = tb ? Bv[static_cast<size_t>(i * N * K + n * K + k)]
                                   : Bv[static_cast<size_t>(i * K * N + k * N + n)];
              s += av * bv;
            }
            expected[static_cast<size_t>(i * M * N + m * N + n)] = s;
          }
        }
      }
      Tensor y = batch_matmul_forward(a, b, ta, tb);
      EXPECT_EQ(y.shape(), (Shape{B0, B1, M, N}));
      EXPECT_EQ(y.dtype(), dtype);
      EXPECT_LT(relative_error(y, expected), tolerance(dtype)) << "ta=" << ta << " tb=" << tb;
    }
  }
}

TEST_P(BatchMatmulTest, BackwardMatchesTheTransposedProducts) {
  const DType dtype = GetParam();
  Generator gen(12);
  const int64_t B = 3, M = 4, K = 5, N = 6;
  Tensor a = random_f64(gen, {B, M, K}).to(dtype);
  Tensor b = random_f64(gen, {B, K, N}).to(dtype);
  Tensor dy = random_f64(gen, {B, M, N}).to(dtype);
  Vec A = seen(a), Bv = seen(b), D = seen(dy);
  Vec da(A.size(), 0), db(Bv.size(), 0);
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t k = 0; k < K; ++k) {
        for (int64_t n = 0; n < N; ++n) {
          const double g = D[static_cast<size_t>((i * M + m) * N + n)];
          da[static_cast<size_t>((i * M + m) * K + k)] +=
              g * Bv[static_cast<size_t>((i * K + k) * N + n)];
          db[static_cast<size_t>((i * K + k) * N + n)] +=
              g * A[static_cast<size_t>((i * M + m) * K + k)];
        }
      }
    }
  }
  BatchMatmulGrads g = batch_matmul_backward(dy, a, b);
  EXPECT_LT(relative_error(g.da, da), tolerance(dtype));
  EXPECT_LT(relative_error(g.db, db), tolerance(dtype));
  BatchMatmulGrads only_b = batch_matmul_backward(dy, a, b, false, false, false, true);
  EXPECT_FALSE(only_b.da.defined());
  EXPECT_TRUE(only_b.db.defined());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BatchMatmulTest,
                         ::testing::Values(DType::float32, DType::bfloat16, DType::float64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(BatchMatmul, EmptyInnerDimensionGivesZeros) {
  Tensor y = batch_matmul_forward(Tensor::zeros({2, 3, 0}), Tensor::zeros({2, 0, 4}));
  EXPECT_EQ(y.shape(), (Shape{2, 3, 4}));
  for (double v : y.to_vector<double>()) EXPECT_EQ(v, 0.0);
}

TEST(BatchMatmul, RejectsMismatchedOperandsNamingTheShapes) {
  EXPECT_THAT(
      [] {
        batch_matmul_forward(Tensor::zeros({2, 3}), Tensor::zeros({3, 2}));
      },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("rank >= 3")));
  EXPECT_THAT(
      [] {
        batch_matmul_forward(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 2}));
      },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("equal batch dimensions")));
  EXPECT_THAT(
      [] {
        batch_matmul_forward(Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 5, 2}));
      },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("[2, 3, 4] and [2, 5, 2]")));
  EXPECT_THAT(
      [] {
        batch_matmul_forward(Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 4, 2}, DType::float64));
      },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("same dtype")));
}

// softmax over the last axis of `x` ([rows, n]) with keep[r][i]; dropped -> -1e9.
Vec reference_masked_softmax(const Vec& x, int64_t rows, int64_t n,
                             const std::function<bool(int64_t, int64_t)>& keep) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    Vec z(static_cast<size_t>(n));
    double m = -1e300;
    for (int64_t i = 0; i < n; ++i) {
      z[static_cast<size_t>(i)] = keep(r, i) ? x[static_cast<size_t>(r * n + i)] : -1e9;
      m = std::max(m, z[static_cast<size_t>(i)]);
    }
    double sum = 0;
    for (double& v : z) sum += (v = std::exp(v - m));
    for (int64_t i = 0; i < n; ++i)
      y[static_cast<size_t>(r * n + i)] = z[static_cast<size_t>(i)] / sum;
  }
  return y;
}

class MaskedSoftmaxTest : public ::testing::TestWithParam<DType> {};

TEST_P(MaskedSoftmaxTest, DropsMaskedPositionsAndBroadcastsTheMask) {
  const DType dtype = GetParam();
  Generator gen(13);
  // x [2, 3, 5]; mask [3, 5] shared by both leading indices; row 1 drops everything.
  Tensor x = random_f64(gen, {2, 3, 5}, -3, 3).to(dtype);
  std::vector<uint8_t> keep = {1, 0, 1, 1, 0,  //
                               0, 0, 0, 0, 0,  //
                               0, 0, 0, 0, 1};
  Tensor mask = Tensor::from_vector(keep, {3, 5});
  Vec expected = reference_masked_softmax(seen(x), 6, 5, [&](int64_t r, int64_t i) {
    return keep[static_cast<size_t>((r % 3) * 5 + i)] != 0;
  });
  Tensor y = masked_softmax_forward(x, mask);
  EXPECT_LT(relative_error(y, expected), tolerance(dtype));
  Vec yv = y.to_vector<double>();
  for (int64_t r = 0; r < 6; ++r) {
    for (int64_t i = 0; i < 5; ++i) {
      const double v = yv[static_cast<size_t>(r * 5 + i)];
      if (r % 3 == 1) {
        EXPECT_NEAR(v, 0.2, tolerance(dtype));  // nothing kept: uniform
      } else if (!keep[static_cast<size_t>((r % 3) * 5 + i)]) {
        EXPECT_EQ(v, 0.0);
      }
    }
  }
  EXPECT_EQ(yv[2 * 5 + 4], 1.0);  // the only kept position of its row
}

TEST_P(MaskedSoftmaxTest, BackwardIsZeroWhereDroppedAndTheSoftmaxGradientElsewhere) {
  const DType dtype = GetParam();
  Generator gen(14);
  Tensor x = random_f64(gen, {4, 6}).to(dtype);
  Tensor dy = random_f64(gen, {4, 6}).to(dtype);
  // mask [4, 1]: rows 0 and 2 keep everything, row 1 and 3 nothing -> then a [1, 6] pattern.
  Tensor mask = Tensor::from_vector(std::vector<int32_t>{1, 1, 0, 1, 0, 1}, {1, 6});
  Tensor y = masked_softmax_forward(x, mask);
  Tensor dx = masked_softmax_backward(dy, y, mask);
  Vec Y = seen(y), D = seen(dy), DX = dx.to_vector<double>();
  const std::vector<int> keep = {1, 1, 0, 1, 0, 1};
  for (int64_t r = 0; r < 4; ++r) {
    double dot = 0;
    for (int64_t i = 0; i < 6; ++i)
      dot += D[static_cast<size_t>(r * 6 + i)] * Y[static_cast<size_t>(r * 6 + i)];
    for (int64_t i = 0; i < 6; ++i) {
      const size_t k = static_cast<size_t>(r * 6 + i);
      const double expected = keep[static_cast<size_t>(i)] ? Y[k] * (D[k] - dot) : 0.0;
      EXPECT_NEAR(DX[k], expected, 4 * tolerance(dtype)) << r << "," << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MaskedSoftmaxTest,
                         ::testing::Values(DType::float32, DType::bfloat16, DType::float64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(MaskedSoftmax, UndefinedMaskIsThePlainSoftmaxAndBadMasksAreRejected) {
  Generator gen(15);
  Tensor x = random_f64(gen, {3, 4});
  Vec expected = reference_masked_softmax(seen(x), 3, 4, [](int64_t, int64_t) { return true; });
  EXPECT_LT(relative_error(masked_softmax_forward(x, Tensor()), expected), 1e-12);
  EXPECT_THAT(
      [&] {
        masked_softmax_forward(x, Tensor::ones({2, 4}, DType::uint8));
      },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("broadcasts to [3, 4]")));
}

TEST(GeluTanh, MatchesTheFormulaInEveryDtype) {
  Generator gen(16);
  Tensor x = random_f64(gen, {7, 9}, -4, 4);
  const double c = std::sqrt(2.0 / M_PI);
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float64}) {
    Tensor xd = x.to(dtype);
    Vec X = seen(xd), y(X.size()), dx(X.size());
    Tensor dy = Tensor::ones(x.shape(), dtype);
    for (size_t i = 0; i < X.size(); ++i) {
      const double v = X[i], u = c * (v + 0.044715 * v * v * v), th = std::tanh(u);
      y[i] = 0.5 * v * (1 + th);
      dx[i] = 0.5 * (1 + th) + 0.5 * v * (1 - th * th) * c * (1 + 3 * 0.044715 * v * v);
    }
    EXPECT_LT(relative_error(gelu_tanh_forward(xd), y), tolerance(dtype)) << dtype_name(dtype);
    EXPECT_LT(relative_error(gelu_tanh_backward(dy, xd), dx), 2 * tolerance(dtype))
        << dtype_name(dtype);
  }
}

// ---- dot_product_attention ----------------------------------------------------------------------

struct AttentionCase {
  int64_t B, T, S, H, Dk, Dv;
};

struct Reference {
  Vec out, dq, dk, dv;
};

// Attention and its gradients for dO, from the definitions, one (b, h) at a time.
Reference reference_attention(const AttentionCase& c, const Vec& q, const Vec& k, const Vec& v,
                              const Vec& dout, double scale,
                              const std::function<bool(int64_t, int64_t, int64_t, int64_t)>& keep) {
  auto Q = [&](int64_t b, int64_t t, int64_t h, int64_t d) {
    return q[static_cast<size_t>(((b * c.T + t) * c.H + h) * c.Dk + d)];
  };
  auto K = [&](int64_t b, int64_t s, int64_t h, int64_t d) {
    return k[static_cast<size_t>(((b * c.S + s) * c.H + h) * c.Dk + d)];
  };
  auto V = [&](int64_t b, int64_t s, int64_t h, int64_t d) {
    return v[static_cast<size_t>(((b * c.S + s) * c.H + h) * c.Dv + d)];
  };
  Reference r;
  r.out.assign(static_cast<size_t>(c.B * c.T * c.H * c.Dv), 0);
  r.dq.assign(q.size(), 0);
  r.dk.assign(k.size(), 0);
  r.dv.assign(v.size(), 0);
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t h = 0; h < c.H; ++h) {
      for (int64_t t = 0; t < c.T; ++t) {
        Vec p(static_cast<size_t>(c.S));
        bool any = false;
        double m = -1e300;
        for (int64_t s = 0; s < c.S; ++s) {
          double sc = 0;
          for (int64_t d = 0; d < c.Dk; ++d) sc += Q(b, t, h, d) * K(b, s, h, d);
          const bool kept = keep(b, h, t, s);
          any = any || kept;
          p[static_cast<size_t>(s)] = kept ? scale * sc : -1e9;
          m = std::max(m, p[static_cast<size_t>(s)]);
        }
        double sum = 0;
        for (double& e : p) sum += (e = std::exp(e - m));
        for (double& e : p) e /= sum;
        // Output and dP.
        Vec dp(static_cast<size_t>(c.S), 0);
        const size_t orow = static_cast<size_t>(((b * c.T + t) * c.H + h) * c.Dv);
        for (int64_t s = 0; s < c.S; ++s) {
          for (int64_t d = 0; d < c.Dv; ++d) {
            r.out[orow + static_cast<size_t>(d)] += p[static_cast<size_t>(s)] * V(b, s, h, d);
            dp[static_cast<size_t>(s)] += dout[orow + static_cast<size_t>(d)] * V(b, s, h, d);
            r.dv[static_cast<size_t>(((b * c.S + s) * c.H + h) * c.Dv + d)] +=
                p[static_cast<size_t>(s)] * dout[orow + static_cast<size_t>(d)];
          }
        }
        double dot = 0;
        for (int64_t s = 0; s < c.S; ++s)
          dot += p[static_cast<size_t>(s)] * dp[static_cast<size_t>(s)];
        for (int64_t s = 0; s < c.S; ++s) {
          const double dscore = keep(b, h, t, s) && any
                                    ? p[static_cast<size_t>(s)] * (dp[static_cast<size_t>(s)] - dot)
                                    : 0.0;
          for (int64_t d = 0; d < c.Dk; ++d) {
            r.dq[static_cast<size_t>(((b * c.T + t) * c.H + h) * c.Dk + d)] +=
                scale * dscore * K(b, s, h, d);
            r.dk[static_cast<size_t>(((b * c.S + s) * c.H + h) * c.Dk + d)] +=
                scale * dscore * Q(b, t, h, d);
          }
        }
      }
    }
  }
  return r;
}

struct MaskSpec {
  const char* name;
  bool causal;
  int mask_rank;  // 0: none; 2: [T, S]; 3: [B, T, S] as [B, 1, T, S]; 4: [B, H, T, S]
};

class AttentionTest : public ::testing::TestWithParam<std::tuple<DType, MaskSpec, int64_t>> {
 protected:
  void TearDown() override { set_attention_block_examples(0); }
};

TEST_P(AttentionTest, ForwardAndBackwardMatchTheDefinition) {
  const auto [dtype, spec, block] = GetParam();
  set_attention_block_examples(block);
  const AttentionCase c{3, 5, 7, 2, 4, 3};
  Generator gen(17);
  Tensor q = random_f64(gen, {c.B, c.T, c.H, c.Dk}, -2, 2).to(dtype);
  Tensor k = random_f64(gen, {c.B, c.S, c.H, c.Dk}, -2, 2).to(dtype);
  Tensor v = random_f64(gen, {c.B, c.S, c.H, c.Dv}).to(dtype);
  Tensor dout = random_f64(gen, {c.B, c.T, c.H, c.Dv}).to(dtype);
  // A random keep pattern; (b = 1, t = 2) keeps nothing, to cover empty rows.
  Tensor mask;
  std::function<bool(int64_t, int64_t, int64_t, int64_t)> keep_mask = [](int64_t, int64_t, int64_t,
                                                                         int64_t) { return true; };
  if (spec.mask_rank > 0) {
    const Shape shape = spec.mask_rank == 2   ? Shape{c.T, c.S}
                        : spec.mask_rank == 3 ? Shape{c.B, 1, c.T, c.S}
                                              : Shape{c.B, c.H, c.T, c.S};
    std::vector<uint8_t> bits(static_cast<size_t>(shape.num_elements()));
    for (auto& bit : bits) bit = gen.next_u64() % 3 != 0;
    mask = Tensor::from_vector(bits, shape);
    keep_mask = [bits, rank = spec.mask_rank, c](int64_t b, int64_t h, int64_t t, int64_t s) {
      if (rank != 2 && b == 1 && t == 2) return false;
      const int64_t i = rank == 2   ? t * c.S + s
                        : rank == 3 ? (b * c.T + t) * c.S + s
                                    : ((b * c.H + h) * c.T + t) * c.S + s;
      return bits[static_cast<size_t>(i)] != 0;
    };
    if (spec.mask_rank != 2) {
      // Write the empty row into the mask itself.
      for (int64_t h = 0; h < (spec.mask_rank == 4 ? c.H : 1); ++h) {
        for (int64_t s = 0; s < c.S; ++s) {
          const int64_t i =
              spec.mask_rank == 3 ? (1 * c.T + 2) * c.S + s : ((1 * c.H + h) * c.T + 2) * c.S + s;
          mask.data<uint8_t>()[i] = 0;
        }
      }
    }
  }
  auto keep = [&](int64_t b, int64_t h, int64_t t, int64_t s) {
    return keep_mask(b, h, t, s) && (!spec.causal || s <= t);
  };
  const double scale = 0.7;
  Reference ref = reference_attention(c, seen(q), seen(k), seen(v), seen(dout), scale, keep);
  AttentionOptions options{.mask = mask, .is_causal = spec.causal, .scale = scale};
  Tensor out = dot_product_attention_forward(q, k, v, options);
  EXPECT_EQ(out.shape(), (Shape{c.B, c.T, c.H, c.Dv}));
  EXPECT_EQ(out.dtype(), dtype);
  EXPECT_LT(relative_error(out, ref.out), tolerance(dtype));
  AttentionGrads g = dot_product_attention_backward(dout, q, k, v, options);
  const double grad_tol = dtype == DType::bfloat16 ? 4e-2 : tolerance(dtype);
  EXPECT_LT(relative_error(g.dquery, ref.dq), grad_tol);
  EXPECT_LT(relative_error(g.dkey, ref.dk), grad_tol);
  EXPECT_LT(relative_error(g.dvalue, ref.dv), grad_tol);
}

INSTANTIATE_TEST_SUITE_P(
    DtypesMasksBlocks, AttentionTest,
    ::testing::Combine(::testing::Values(DType::float32, DType::bfloat16, DType::float64),
                       ::testing::Values(MaskSpec{"none", false, 0}, MaskSpec{"causal", true, 0},
                                         MaskSpec{"TS", false, 2}, MaskSpec{"BTS", false, 3},
                                         MaskSpec{"BHTS_causal", true, 4}),
                       ::testing::Values(int64_t{0}, int64_t{1}, int64_t{2})),
    [](const auto& info) {
      return std::string(dtype_name(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name +
             "_block" + std::to_string(std::get<2>(info.param));
    });

// Shapes whose heads fill whole 16-float vectors (the ViT's: 49 tokens, key_dim 16), several
// 64-query chunks (T = 70 pads to 80), and features past a multiple of 16 (17, 18), causal and not:
// every path of the float32 head kernels against the float64 reference.
class AttentionShapesTest
    : public ::testing::TestWithParam<std::tuple<DType, AttentionCase, bool>> {};

TEST_P(AttentionShapesTest, ForwardAndBackwardMatchTheDefinition) {
  const auto [dtype, c, causal] = GetParam();
  Generator gen(23);
  Tensor q = random_f64(gen, {c.B, c.T, c.H, c.Dk}, -1, 1).to(dtype);
  Tensor k = random_f64(gen, {c.B, c.S, c.H, c.Dk}, -1, 1).to(dtype);
  Tensor v = random_f64(gen, {c.B, c.S, c.H, c.Dv}).to(dtype);
  Tensor dout = random_f64(gen, {c.B, c.T, c.H, c.Dv}).to(dtype);
  auto keep = [causal](int64_t, int64_t, int64_t t, int64_t s) { return !causal || s <= t; };
  const double scale = 0.25;
  Reference ref = reference_attention(c, seen(q), seen(k), seen(v), seen(dout), scale, keep);
  AttentionOptions options{.is_causal = causal, .scale = scale};
  Tensor out = dot_product_attention_forward(q, k, v, options);
  ASSERT_EQ(out.shape(), (Shape{c.B, c.T, c.H, c.Dv}));
  EXPECT_EQ(out.dtype(), dtype);
  EXPECT_LT(relative_error(out, ref.out), tolerance(dtype));
  AttentionGrads g = dot_product_attention_backward(dout, q, k, v, options);
  const double grad_tol = dtype == DType::bfloat16 ? 4e-2 : tolerance(dtype);
  EXPECT_LT(relative_error(g.dquery, ref.dq), grad_tol);
  EXPECT_LT(relative_error(g.dkey, ref.dk), grad_tol);
  EXPECT_LT(relative_error(g.dvalue, ref.dv), grad_tol);
}

INSTANTIATE_TEST_SUITE_P(VectorShapes, AttentionShapesTest,
                         ::testing::Combine(::testing::Values(DType::float32, DType::bfloat16),
                                            ::testing::Values(AttentionCase{2, 49, 49, 4, 16, 16},
                                                              AttentionCase{1, 70, 37, 2, 17, 18},
                                                              AttentionCase{3, 1, 5, 1, 32, 16}),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           const AttentionCase& c = std::get<1>(info.param);
                           return std::string(dtype_name(std::get<0>(info.param))) + "_T" +
                                  std::to_string(c.T) + "_S" + std::to_string(c.S) + "_Dk" +
                                  std::to_string(c.Dk) + "_Dv" + std::to_string(c.Dv) +
                                  (std::get<2>(info.param) ? "_causal" : "");
                         });

TEST(Attention, DefaultScaleIsOneOverSqrtKeyDim) {
  Generator gen(18);
  Tensor q = random_f64(gen, {2, 3, 2, 9});
  Tensor k = random_f64(gen, {2, 4, 2, 9});
  Tensor v = random_f64(gen, {2, 4, 2, 5});
  Tensor explicit_scale = dot_product_attention_forward(q, k, v, {.scale = 1.0 / 3.0});
  Tensor default_scale = dot_product_attention_forward(q, k, v);
  EXPECT_LT(relative_error(default_scale, explicit_scale.to_vector<double>()), 1e-15);
}

TEST(Attention, RejectsInconsistentShapesAndBadMasks) {
  Tensor q = Tensor::zeros({2, 3, 4, 5}), k = Tensor::zeros({2, 6, 4, 5});
  Tensor v = Tensor::zeros({2, 6, 4, 7});
  EXPECT_THAT(
      [&] {
        dot_product_attention_forward(q, Tensor::zeros({2, 6, 4, 4}), v);
      },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("equal B, H, Dk and S")));
  EXPECT_THAT(
      [&] {
        dot_product_attention_forward(q.reshape({6, 4, 5}), k, v);
      },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("rank 4")));
  EXPECT_THAT([&] { dot_product_attention_forward(q, k, v.to(DType::float64)); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("one dtype")));
  EXPECT_THAT(
      [&] {
        dot_product_attention_forward(q, k, v, {.mask = Tensor::ones({2, 3, 6})});
      },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("broadcasts to [2, 4, 3, 6]")));
  EXPECT_THAT(
      [&] {
        dot_product_attention_backward(Tensor::zeros({2, 3, 4, 5}), q, k, v);
      },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("doutput of shape [2, 3, 4, 7]")));
}

}  // namespace
}  // namespace lockstep::ops
