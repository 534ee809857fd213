// MultiHeadAttention against a float64 reference written here from Keras' definition (for given
// weights, with and without masks, fused and unfused paths, float32, float64 and mixed_bfloat16),
// its Keras weights and config; LayerNormalization against Keras' formula (including its
// mixed-precision cast); GlobalAveragePooling1D and PositionEmbedding values and gradients.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/keras/layers.h"
#include "lockstep/keras/model.h"
#include "testing/gradient_check.h"
#include "testing/policy_guard.h"

namespace lockstep::keras::layers {
namespace {

using lockstep::testing::random_f64;
using ::testing::HasSubstr;
using Vec = std::vector<double>;

double max_relative_error(const Tensor& actual, const Vec& expected) {
  Vec a = actual.to_vector<double>();
  EXPECT_EQ(a.size(), expected.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), expected.size()); ++i) {
    diff = std::max(diff, std::abs(a[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  return diff / std::max(scale, 1e-300);
}

using Keep = std::function<bool(int64_t b, int64_t t, int64_t s)>;

struct MhaReference {
  Vec output;  // [B, T, E]
  Vec probs;   // [B, H, T, S]
};

// Keras' MultiHeadAttention for query [B, T, Dq], value [B, S, Dv], key [B, S, Dk] and weights in
// Keras' shapes (biases may be empty), from the definition.
MhaReference reference_mha(const Vec& query, const Vec& value, const Vec& key, int64_t B, int64_t T,
                           int64_t S, int64_t Dq, int64_t Dvi, int64_t Dki, int64_t H, int64_t Kd,
                           int64_t Vd, int64_t E, const std::vector<Vec>& w, const Keep& keep) {
  const Vec &wq = w[0], &bq = w[1], &wk = w[2], &bk = w[3], &wv = w[4], &bv = w[5], &wo = w[6],
            &bo = w[7];
  auto project = [&](const Vec& x, int64_t n, int64_t din, const Vec& kernel, const Vec& bias,
                     int64_t dout) {
    Vec y(static_cast<size_t>(B * n * H * dout), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < dout; ++d) {
            double s = bias.empty() ? 0.0 : bias[static_cast<size_t>(h * dout + d)];
            for (int64_t c = 0; c < din; ++c)
              s += x[static_cast<size_t>((b * n + i) * din + c)] *
                   kernel[static_cast<size_t>((c * H + h) * dout + d)];
            y[static_cast<size_t>(((b * n + i) * H + h) * dout + d)] = s;
          }
    return y;
  };
  const Vec Q = project(query, T, Dq, wq, bq, Kd), K = project(key, S, Dki, wk, bk, Kd),
            V = project(value, S, Dvi, wv, bv, Vd);
  MhaReference r;
  r.probs.assign(static_cast<size_t>(B * H * T * S), 0.0);
  Vec O(static_cast<size_t>(B * T * H * Vd), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        Vec z(static_cast<size_t>(S));
        double m = -1e300;
        for (int64_t s = 0; s < S; ++s) {
          double dot = 0;
          for (int64_t d = 0; d < Kd; ++d)
            dot += Q[static_cast<size_t>(((b * T + t) * H + h) * Kd + d)] *
                   K[static_cast<size_t>(((b * S + s) * H + h) * Kd + d)];
          z[static_cast<size_t>(s)] = keep(b, t, s) ? dot / std::sqrt(double(Kd)) : -1e9;
          m = std::max(m, z[static_cast<size_t>(s)]);
        }
        double sum = 0;
        for (double& e : z) sum += (e = std::exp(e - m));
        for (int64_t s = 0; s < S; ++s) {
          const double p = z[static_cast<size_t>(s)] / sum;
          r.probs[static_cast<size_t>(((b * H + h) * T + t) * S + s)] = p;
          for (int64_t e = 0; e < Vd; ++e)
            O[static_cast<size_t>(((b * T + t) * H + h) * Vd + e)] +=
                p * V[static_cast<size_t>(((b * S + s) * H + h) * Vd + e)];
        }
      }
  r.output.assign(static_cast<size_t>(B * T * E), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t o = 0; o < E; ++o) {
        double s = bo.empty() ? 0.0 : bo[static_cast<size_t>(o)];
        for (int64_t h = 0; h < H; ++h)
          for (int64_t e = 0; e < Vd; ++e)
            s += O[static_cast<size_t>(((b * T + t) * H + h) * Vd + e)] *
                 wo[static_cast<size_t>((h * Vd + e) * E + o)];
        r.output[static_cast<size_t>((b * T + t) * E + o)] = s;
      }
  return r;
}

struct MhaFixture {
  static constexpr int64_t B = 3, T = 5, S = 6, Dq = 7, Dvi = 4, Dki = 5, H = 2, Kd = 3, Vd = 4,
                           E = 7;
  Tensor query, value, key;
  std::vector<Vec> weights;  // Keras order; empty biases with use_bias = false
};

// Builds `layer` on the fixture's shapes and sets random weights (not the initializers').
MhaFixture set_up(MultiHeadAttention& layer, DType dtype, bool use_bias = true) {
  MhaFixture f;
  Generator gen(31);
  f.query = random_f64(gen, {f.B, f.T, f.Dq}).to(dtype);
  f.value = random_f64(gen, {f.B, f.S, f.Dvi}).to(dtype);
  f.key = random_f64(gen, {f.B, f.S, f.Dki}).to(dtype);
  layer.attend(f.query, f.value, f.key);  // builds
  std::vector<Variable> vars = layer.weights();
  EXPECT_EQ(vars.size(), use_bias ? 8u : 4u);
  for (size_t i = 0, v = 0; i < 8; ++i) {
    if (!use_bias && i % 2 == 1) {
      f.weights.emplace_back();
      continue;
    }
    Tensor w = random_f64(gen, vars[v].shape(), -0.8, 0.8);
    vars[v].assign(w.to(vars[v].dtype()));
    f.weights.push_back(vars[v].raw_value().to_vector<double>());
    ++v;
  }
  return f;
}

MhaReference reference(const MhaFixture& f, const Keep& keep) {
  return reference_mha(f.query.to_vector<double>(), f.value.to_vector<double>(),
                       f.key.to_vector<double>(), f.B, f.T, f.S, f.Dq, f.Dvi, f.Dki, f.H, f.Kd,
                       f.Vd, f.E, f.weights, keep);
}

MultiHeadAttentionOptions fixture_options(const std::string& dtype, bool use_bias = true) {
  return {.num_heads = MhaFixture::H,
          .key_dim = MhaFixture::Kd,
          .value_dim = MhaFixture::Vd,
          .use_bias = use_bias,
          .dtype = dtype};
}

struct MaskCase {
  const char* name;
  int rank;  // 0 none, 2 [T, S], 3 [B, T, S]
  bool causal;
};

class MultiHeadAttentionReference
    : public ::testing::TestWithParam<std::tuple<const char*, MaskCase, bool>> {};

TEST_P(MultiHeadAttentionReference, OutputAndScoresMatchKerasDefinition) {
  const auto [dtype_name_, mask_case, use_bias] = GetParam();
  const std::string policy = dtype_name_;
  const DType dtype = policy == "float64" ? DType::float64 : DType::float32;
  MultiHeadAttention layer(fixture_options(policy, use_bias));
  MhaFixture f = set_up(layer, dtype, use_bias);
  Generator gen(32);
  Tensor mask;
  Keep keep = [](int64_t, int64_t, int64_t) { return true; };
  if (mask_case.rank > 0) {
    const Shape shape = mask_case.rank == 2 ? Shape{f.T, f.S} : Shape{f.B, f.T, f.S};
    std::vector<int32_t> bits(static_cast<size_t>(shape.num_elements()));
    for (auto& bit : bits) bit = gen.next_u64() % 3 != 0;
    if (mask_case.rank == 3) {
      for (int64_t s = 0; s < f.S; ++s) bits[static_cast<size_t>((1 * f.T + 3) * f.S + s)] = 0;
    }
    mask = Tensor::from_vector(bits, shape);
    keep = [bits, f, rank = mask_case.rank](int64_t b, int64_t t, int64_t s) {
      const int64_t i = rank == 2 ? t * f.S + s : (b * f.T + t) * f.S + s;
      return bits[static_cast<size_t>(i)] != 0;
    };
  }
  const bool causal = mask_case.causal;
  Keep all = [keep, causal](int64_t b, int64_t t, int64_t s) {
    return keep(b, t, s) && (!causal || s <= t);
  };
  MhaReference ref = reference(f, all);
  const double tol = dtype == DType::float64 ? 1e-12 : 2e-5;
  AttentionCallOptions call{.attention_mask = mask, .use_causal_mask = causal};
  // Fused kernel.
  AttentionOutput fused = layer.attend(f.query, f.value, f.key, call);
  EXPECT_EQ(fused.output.shape(), (Shape{f.B, f.T, f.E}));
  EXPECT_FALSE(fused.scores.defined());
  EXPECT_LT(max_relative_error(fused.output, ref.output), tol);
  // Keras' unfused steps, with the probabilities.
  call.return_attention_scores = true;
  AttentionOutput unfused = layer.attend(f.query, f.value, f.key, call);
  EXPECT_LT(max_relative_error(unfused.output, ref.output), tol);
  ASSERT_TRUE(unfused.scores.defined());
  EXPECT_EQ(unfused.scores.shape(), (Shape{f.B, f.H, f.T, f.S}));
  EXPECT_LT(max_relative_error(unfused.scores, ref.probs), tol);
}

INSTANTIATE_TEST_SUITE_P(
    MasksAndDtypes, MultiHeadAttentionReference,
    ::testing::Combine(::testing::Values("float32", "float64"),
                       ::testing::Values(MaskCase{"NoMask", 0, false}, MaskCase{"Causal", 0, true},
                                         MaskCase{"SharedMask", 2, false},
                                         MaskCase{"PerExampleMask", 3, false},
                                         MaskCase{"PerExampleMaskCausal", 3, true}),
                       ::testing::Bool()),
    [](const auto& info) {
      return std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name +
             (std::get<2>(info.param) ? "_Bias" : "_NoBias");
    });

TEST(MultiHeadAttention, Float64GradientsOfTheFusedPathMatchCentralDifferences) {
  MultiHeadAttention layer(fixture_options("float64"));
  MhaFixture f = set_up(layer, DType::float64);
  std::vector<int32_t> bits(static_cast<size_t>(f.T * f.S), 1);
  bits[3] = bits[7] = bits[8] = 0;
  const Tensor mask = Tensor::from_vector(bits, {f.T, f.S});
  std::vector<Variable> vars = layer.trainable_weights();
  std::vector<Tensor> checked{f.query, f.value, f.key};
  for (const Variable& v : vars) checked.push_back(v.raw_value().clone());
  auto fn = [&](const std::vector<Tensor>& xs) {
    for (size_t i = 0; i < vars.size(); ++i) {
      vars[i].assign(xs[3 + i]);
      const Tensor& value = vars[i].raw_value();
      autodiff::record("bind", {xs[3 + i]}, {value},
                       [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
    }
    return layer.attend(xs[0], xs[1], xs[2], {.attention_mask = mask, .use_causal_mask = true})
        .output;
  };
  EXPECT_TRUE(lockstep::testing::gradients_match(fn, checked));
}

TEST(MultiHeadAttention, MixedBfloat16ComputesInBfloat16CloseToFloat32) {
  MultiHeadAttention f32_layer(fixture_options("float32"));
  MhaFixture f = set_up(f32_layer, DType::float32);
  lockstep::testing::PolicyGuard guard("mixed_bfloat16");
  MultiHeadAttention mixed(fixture_options(""));
  EXPECT_EQ(mixed.dtype_policy().name(), "mixed_bfloat16");
  mixed.attend(f.query, f.value, f.key);
  std::vector<Variable> a = f32_layer.weights(), b = mixed.weights();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i].dtype(), DType::float32);  // variables stay float32
    b[i].assign(a[i].raw_value());
  }
  MhaReference ref = reference(f, [](int64_t, int64_t, int64_t) { return true; });
  AttentionOutput out = mixed.attend(f.query, f.value, f.key, {.use_causal_mask = true});
  AttentionOutput unfused =
      mixed.attend(f.query, f.value, f.key, {.return_attention_scores = true});
  EXPECT_EQ(out.output.dtype(), DType::bfloat16);
  EXPECT_EQ(unfused.output.dtype(), DType::bfloat16);
  EXPECT_EQ(unfused.scores.dtype(), DType::float32);
  EXPECT_LT(max_relative_error(unfused.output, ref.output), 3e-2);
  EXPECT_LT(max_relative_error(unfused.scores, ref.probs), 3e-2);
  // Variables receive float32 gradients.
  GradientTape tape;
  Tensor loss = reduce_sum(cast(mixed.attend(f.query, f.value, f.key).output, DType::float32));
  for (const Tensor& g : tape.gradient(loss, mixed.trainable_weights())) {
    ASSERT_TRUE(g.defined());
    EXPECT_EQ(g.dtype(), DType::float32);
  }
}

TEST(MultiHeadAttention, HasKerasWeightNamesShapesAndGlorotFans) {
  clear_session();
  MultiHeadAttention layer({.num_heads = 4, .key_dim = 16});
  layer(Tensor::zeros({2, 49, 64}));
  std::vector<std::string> names;
  for (const Variable& v : layer.weights()) names.push_back(v.name());
  EXPECT_THAT(names, ::testing::ElementsAre(
                         "multi_head_attention/query/kernel", "multi_head_attention/query/bias",
                         "multi_head_attention/key/kernel", "multi_head_attention/key/bias",
                         "multi_head_attention/value/kernel", "multi_head_attention/value/bias",
                         "multi_head_attention/attention_output/kernel",
                         "multi_head_attention/attention_output/bias"));
  EXPECT_EQ(layer.query_kernel().shape(), (Shape{64, 4, 16}));
  EXPECT_EQ(layer.query_bias().shape(), (Shape{4, 16}));
  EXPECT_EQ(layer.output_kernel().shape(), (Shape{4, 16, 64}));
  EXPECT_EQ(layer.output_bias().shape(), (Shape{64}));
  // Keras' fans of a rank-3 kernel [a, b, c]: fan_in = a·b, fan_out = a·c.
  auto max_abs = [](const Variable& v) {
    double m = 0;
    for (double x : v.raw_value().to_vector<double>()) m = std::max(m, std::abs(x));
    return m;
  };
  const double query_limit = std::sqrt(6.0 / (64 * 4 + 64 * 16));
  const double output_limit = std::sqrt(6.0 / (4 * 16 + 4 * 64));
  EXPECT_LE(max_abs(layer.query_kernel()), query_limit);
  EXPECT_GT(max_abs(layer.query_kernel()), 0.95 * query_limit);
  EXPECT_LE(max_abs(layer.output_kernel()), output_limit);
  EXPECT_GT(max_abs(layer.output_kernel()), 0.95 * output_limit);
  EXPECT_EQ(max_abs(layer.query_bias()), 0.0);
}

TEST(MultiHeadAttention, TakesTheMaskAsAFourthInputInAFunctionalGraph) {
  MultiHeadAttention probe(fixture_options("float32"));
  MhaFixture f = set_up(probe, DType::float32);
  auto q = Input({f.T, f.Dq}), v = Input({f.S, f.Dvi}), k = Input({f.S, f.Dki});
  auto m = Input({f.T, f.S}, DType::uint8);
  auto layer = std::make_shared<MultiHeadAttention>(fixture_options("float32"));
  Model model({q, v, k, m}, (*layer)({q, v, k, m}));
  std::vector<Variable> a = probe.weights(), b = layer->weights();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) b[i].assign(a[i].raw_value());
  std::vector<uint8_t> bits(static_cast<size_t>(f.B * f.T * f.S));
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = (i * 7) % 5 != 0;
  Tensor mask = Tensor::from_vector(bits, {f.B, f.T, f.S});
  Tensor y = model(std::vector<Tensor>{f.query, f.value, f.key, mask});
  MhaReference ref = reference(f, [&](int64_t b_, int64_t t, int64_t s) {
    return bits[static_cast<size_t>((b_ * f.T + t) * f.S + s)] != 0;
  });
  EXPECT_LT(max_relative_error(y, ref.output), 2e-5);
}

TEST(MultiHeadAttention, DropoutAppliesInTrainingOnlyAndIsSeeded) {
  auto make = [] {
    return MultiHeadAttention({.num_heads = 2, .key_dim = 3, .dropout = 0.5, .seed = 9});
  };
  MultiHeadAttention a = make(), b = make();
  Generator gen(33);
  Tensor x = random_f64(gen, {2, 6, 5}).to(DType::float32);
  a(x);
  b(x);
  std::vector<Variable> wa = a.weights(), wb = b.weights();
  for (size_t i = 0; i < wa.size(); ++i) wb[i].assign(wa[i].raw_value());
  // Inference: no dropout; the fused and unfused paths agree.
  Tensor inference = a(x, false);
  AttentionOutput scored = a.attend(x, x, Tensor(), {.return_attention_scores = true});
  EXPECT_LT(max_relative_error(scored.output, inference.to_vector<double>()), 1e-5);
  // Training: another output, the same for two layers with the same seed.
  Tensor train_a = a(x, true), train_b = b(x, true);
  EXPECT_GT(max_relative_error(train_a, inference.to_vector<double>()), 1e-3);
  EXPECT_EQ(train_a.to_vector<float>(), train_b.to_vector<float>());
}

TEST(MultiHeadAttention, ConfigHoldsKerasKeys) {
  MultiHeadAttention layer({.num_heads = 3,
                            .key_dim = 8,
                            .dropout = 0.1,
                            .output_shape = 12,
                            .kernel_initializer = "he_uniform",
                            .seed = 4,
                            .name = "mha"});
  const nlohmann::json c = layer.get_config();
  EXPECT_EQ(c["name"], "mha");
  EXPECT_EQ(c["num_heads"], 3);
  EXPECT_EQ(c["key_dim"], 8);
  EXPECT_EQ(c["value_dim"], 8);  // Keras resolves value_dim=None to key_dim
  EXPECT_EQ(c["dropout"], 0.1);
  EXPECT_EQ(c["use_bias"], true);
  EXPECT_EQ(c["output_shape"], 12);
  EXPECT_EQ(c["kernel_initializer"], "he_uniform");
  EXPECT_EQ(c["bias_initializer"], "zeros");
  EXPECT_EQ(c["seed"], 4);
  EXPECT_TRUE(c["attention_axes"].is_null());
}

TEST(MultiHeadAttention, RejectsBadOptionsShapesAndMasks) {
  EXPECT_THAT([] { MultiHeadAttention({.num_heads = 0, .key_dim = 4}); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("num_heads > 0")));
  EXPECT_THAT([] { MultiHeadAttention({.num_heads = 2, .key_dim = 0}); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("key_dim > 0")));
  EXPECT_THAT([] { MultiHeadAttention({.num_heads = 2, .key_dim = 4, .dropout = 1.0}); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("0 <= dropout < 1")));
  EXPECT_THROW(MultiHeadAttention({.num_heads = 2, .key_dim = 4, .kernel_initializer = "nope"}),
               InvalidArgument);
  MultiHeadAttention layer({.num_heads = 2, .key_dim = 4});
  EXPECT_THAT(
      [&] {
        layer(Tensor::zeros({2, 5}));
      },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("rank 3")));
  layer(Tensor::zeros({2, 5, 6}));
  EXPECT_THAT(
      [&] {
        layer(Tensor::zeros({2, 5, 7}));
      },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("query [B, T, 6]")));
  EXPECT_THAT(
      [&] {
        layer.attend(Tensor::zeros({2, 5, 6}), Tensor::zeros({2, 4, 6}), Tensor::zeros({2, 3, 6}));
      },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("value and key")));
  EXPECT_THAT(
      [&] {
        layer.attend(Tensor::zeros({2, 5, 6}), Tensor::zeros({2, 5, 6}), Tensor(),
                     {.attention_mask = Tensor::ones({2, 5, 4})});
      },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("attention_mask of shape [2, 5, 5]")));
}

// ---- LayerNormalization against Keras --------------------------------------------------------

// Keras 3's LayerNormalization.call: mean and variance over the last axis,
// inv = rsqrt(variance + epsilon) · gamma, outputs = x · inv + (beta − mean · inv).
Vec keras_layer_norm(const Vec& x, int64_t rows, int64_t d, const Vec& gamma, const Vec& beta,
                     double epsilon) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) mean += x[static_cast<size_t>(r * d + i)];
    mean /= d;
    for (int64_t i = 0; i < d; ++i) {
      const double c = x[static_cast<size_t>(r * d + i)] - mean;
      var += c * c;
    }
    var /= d;
    for (int64_t i = 0; i < d; ++i) {
      const double inv = gamma[static_cast<size_t>(i)] / std::sqrt(var + epsilon);
      y[static_cast<size_t>(r * d + i)] =
          x[static_cast<size_t>(r * d + i)] * inv + (beta[static_cast<size_t>(i)] - mean * inv);
    }
  }
  return y;
}

TEST(LayerNormalizationKeras, MatchesKerasFormulaInFloat32AndUnderMixedBfloat16) {
  Generator gen(41);
  Tensor x = random_f64(gen, {4, 3, 16}, -2, 3).to(DType::float32);
  Vec gamma_v, beta_v;
  Tensor gamma = random_f64(gen, {16}, 0.5, 1.5).to(DType::float32);
  Tensor beta = random_f64(gen, {16}).to(DType::float32);
  for (double epsilon : {1e-3, 1e-6}) {
    LayerNormalization f32({.epsilon = epsilon});
    f32(x);
    f32.gamma().assign(gamma);
    f32.beta().assign(beta);
    Vec expected = keras_layer_norm(x.to_vector<double>(), 12, 16, gamma.to_vector<double>(),
                                    beta.to_vector<double>(), epsilon);
    EXPECT_LT(max_relative_error(f32(x), expected), 2e-6);
    EXPECT_EQ(f32.get_config()["epsilon"], epsilon);
    // mixed_bfloat16: Keras casts the bfloat16 input to float32 (the layer's dtype), normalizes
    // with the float32 gamma and beta, and casts the result back to bfloat16.
    lockstep::testing::PolicyGuard guard("mixed_bfloat16");
    LayerNormalization mixed({.epsilon = epsilon});
    Tensor xb = x.to(DType::bfloat16);
    mixed(xb);
    EXPECT_EQ(mixed.gamma().dtype(), DType::float32);
    mixed.gamma().assign(gamma);
    mixed.beta().assign(beta);
    Tensor y = mixed(xb);
    EXPECT_EQ(y.dtype(), DType::bfloat16);
    Vec from_bf16 = keras_layer_norm(xb.to_vector<double>(), 12, 16, gamma.to_vector<double>(),
                                     beta.to_vector<double>(), epsilon);
    Vec got = y.to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i) {
      // One bfloat16 rounding of the float32 result: within half an ulp (2^-8 relative).
      EXPECT_NEAR(got[i], from_bf16[i], std::abs(from_bf16[i]) * 0.0040 + 1e-6) << i;
    }
  }
}

// ---- GlobalAveragePooling1D and PositionEmbedding
// ------------------------------------------------

TEST(GlobalAveragePooling1D, AveragesOverTheStepsAxis) {
  Generator gen(42);
  Tensor x = random_f64(gen, {3, 5, 4});
  Vec X = x.to_vector<double>(), expected(12, 0.0);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t t = 0; t < 5; ++t)
      for (int64_t c = 0; c < 4; ++c)
        expected[static_cast<size_t>(b * 4 + c)] += X[static_cast<size_t>((b * 5 + t) * 4 + c)] / 5;
  GlobalAveragePooling1D pool({.dtype = "float64"});
  Tensor y = pool(x);
  EXPECT_EQ(y.shape(), (Shape{3, 4}));
  EXPECT_LT(max_relative_error(y, expected), 1e-14);
  EXPECT_EQ(GlobalAveragePooling1D({.keepdims = true})(x.to(DType::float32)).shape(),
            (Shape{3, 1, 4}));
  EXPECT_THAT(
      [&] {
        pool(Tensor::zeros({3, 4}, DType::float64));
      },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("rank 3")));
}

TEST(PositionEmbedding, ReturnsTheLeadingRowsPerExampleAndSumsTheirGradientOverTheBatch) {
  PositionEmbedding pos({.sequence_length = 6, .dtype = "float64"});
  Generator gen(43);
  Tensor x = random_f64(gen, {3, 4, 5});
  pos(x);
  Tensor table = random_f64(gen, {6, 5});
  pos.embeddings().assign(table);
  Vec E = table.to_vector<double>();
  GradientTape tape;
  Tensor y = pos(x);
  EXPECT_EQ(y.shape(), (Shape{3, 4, 5}));
  Vec Y = y.to_vector<double>();
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < 20; ++i)
      EXPECT_EQ(Y[static_cast<size_t>(b * 20 + i)], E[static_cast<size_t>(i)]);
  Tensor w = random_f64(gen, {3, 4, 5});
  std::vector<Tensor> g = tape.gradient(reduce_sum(mul(y, w)), {pos.embeddings()});
  Vec G = g[0].to_vector<double>(), W = w.to_vector<double>();
  ASSERT_EQ(G.size(), 30u);
  for (int64_t i = 0; i < 30; ++i) {
    double expected = 0;
    if (i < 20)
      for (int64_t b = 0; b < 3; ++b) expected += W[static_cast<size_t>(b * 20 + i)];
    EXPECT_NEAR(G[static_cast<size_t>(i)], expected, 1e-14) << i;
  }
  EXPECT_THAT(
      [&] {
        pos(Tensor::zeros({3, 7, 5}, DType::float64));
      },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("at most 6 positions")));
  EXPECT_THAT([] { PositionEmbedding({.sequence_length = 0}); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("sequence_length > 0")));
}

}  // namespace
}  // namespace lockstep::keras::layers
