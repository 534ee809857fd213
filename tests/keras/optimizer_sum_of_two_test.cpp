// The training step's fused path: ElementwiseUpdate::apply_sum_of_two(a, b) must write exactly
// the bits of apply() on g = a + b (summed here, element by element in float32), for every
// optimizer and for the options that take the sum-then-apply path (clipping, weight decay), with
// a and b float32 or bfloat16 (two replicas' gradients of a kernel multiplied in bfloat16, each
// widened before the sum); and either path with its outputs streamed (non-temporal stores) the
// bits of it with them stored.
// The step relies on it: N replicas on any number of threads give the same weights only if the
// path a chunk takes does not change its bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "lockstep/core/bfloat16.h"
#include "lockstep/keras/optimizers.h"

namespace lockstep::keras::optimizers {
namespace {

struct Case {
  std::string name;
  std::function<std::unique_ptr<Optimizer>()> make;
};

std::vector<Case> cases() {
  return {
      {"adam", [] { return std::make_unique<Adam>(); }},
      {"adam_amsgrad", [] { return std::make_unique<Adam>(AdamOptions{.amsgrad = true}); }},
      {"adam_clipvalue",
       [] { return std::make_unique<Adam>(AdamOptions{.base = {.clipvalue = 0.01}}); }},
      {"adamw", [] { return std::make_unique<AdamW>(AdamWOptions{.weight_decay = 0.01}); }},
      {"sgd_momentum", [] { return std::make_unique<SGD>(SGDOptions{.momentum = 0.9}); }},
      {"rmsprop", [] { return std::make_unique<RMSprop>(); }},
      {"adagrad", [] { return std::make_unique<Adagrad>(); }},
  };
}

std::vector<float> random_values(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp must not see the null data() of an empty vector.
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// What the update writes beside the new weights: nothing, the bfloat16 rounding of each as a
// float32 value, or as bfloat16 (RoundedOut's two forms).
enum class RoundedKind { none, values, bf16 };

// One update of n elements through apply() on a summed gradient, or through apply_sum_of_two();
// the rounded copy, of either form, as float32 values.
struct Outputs {
  std::vector<float> w;
  std::vector<std::vector<float>> slots;
  std::vector<float> rounded;
};

// Outputs at `shift` floats past a 64-byte boundary (0: every non-temporal store's alignment; 3:
// none), streamed as `streamed` says.
struct Placement {
  size_t shift = 0;
  distribute::Streamed streamed{};
};

// n floats at `shift` floats past a 64-byte boundary, copied out as a vector.
class ShiftedBuffer {
 public:
  ShiftedBuffer(size_t n, size_t shift) : storage_(n + shift + 16), n_(n) {
    const auto address = reinterpret_cast<uintptr_t>(storage_.data());
    data_ = storage_.data() + ((64 - address % 64) % 64) / sizeof(float) + shift;
  }
  float* data() { return data_; }
  std::vector<float> values() const { return {data_, data_ + n_}; }

 private:
  std::vector<float> storage_;
  size_t n_;
  float* data_;
};

// bf16_terms: a and b are bfloat16 (the fused path reads them so; the other sums their float32
// values).
Outputs run_update(const Case& c, size_t n, bool fused, RoundedKind kind,
                   const Placement& place = {}, bool bf16_terms = false) {
  std::unique_ptr<Optimizer> opt = c.make();
  Variable v(Tensor::from_vector(random_values(n, 1.0f, 1), {static_cast<int64_t>(n)}), "w");
  opt->bind({v});
  const std::vector<Variable> slot_vars = opt->slot_variables(0);
  // Slots away from their initial values, as after some steps (Adam's v must stay positive).
  std::vector<std::vector<float>> slots_in;
  for (size_t k = 0; k < slot_vars.size(); ++k) {
    std::vector<float> s = random_values(n, 0.01f, 10 + static_cast<uint32_t>(k));
    for (float& x : s) x = std::abs(x);
    slots_in.push_back(s);
  }
  const std::vector<float> w = random_values(n, 1.0f, 2);
  std::vector<float> a = random_values(n, 0.1f, 3);
  std::vector<float> b = random_values(n, 0.1f, 4);
  std::vector<bfloat16> a16, b16;
  if (bf16_terms) {
    for (size_t j = 0; j < n; ++j) {
      a16.emplace_back(a[j]);
      b16.emplace_back(b[j]);
      a[j] = static_cast<float>(a16[j]);
      b[j] = static_cast<float>(b16[j]);
    }
  }
  opt->begin_update({});
  ShiftedBuffer w_out(n, place.shift);
  std::vector<ShiftedBuffer> slots_out;
  std::vector<const float*> in_ptrs;
  std::vector<float*> out_ptrs;
  for (size_t k = 0; k < slot_vars.size(); ++k) {
    slots_out.emplace_back(n, place.shift);
    in_ptrs.push_back(slots_in[k].data());
  }
  for (ShiftedBuffer& b : slots_out) out_ptrs.push_back(b.data());
  Outputs out;
  std::vector<float> g(n);
  // n floats, or n bfloat16 in their first half: at the same shift from a 64-byte boundary.
  ShiftedBuffer rounded_out(n, place.shift);
  distribute::RoundedOut rounded{};
  if (kind == RoundedKind::values) rounded.values = rounded_out.data();
  if (kind == RoundedKind::bf16) rounded.bf16 = reinterpret_cast<bfloat16*>(rounded_out.data());
  if (fused && bf16_terms) {
    opt->apply_sum_of_two(0, 0, w.data(), a16.data(), b16.data(), g.data(), in_ptrs, w_out.data(),
                          out_ptrs, n, rounded, place.streamed);
  } else if (fused) {
    opt->apply_sum_of_two(0, 0, w.data(), a.data(), b.data(), g.data(), in_ptrs, w_out.data(),
                          out_ptrs, n, rounded, place.streamed);
  } else {
    for (size_t j = 0; j < n; ++j) g[j] = a[j] + b[j];
    opt->apply(0, 0, w.data(), g.data(), in_ptrs, w_out.data(), out_ptrs, n, rounded,
               place.streamed);
  }
  opt->end_update();
  out.w = w_out.values();
  for (const ShiftedBuffer& b : slots_out) out.slots.push_back(b.values());
  if (kind == RoundedKind::values) out.rounded = rounded_out.values();
  if (kind == RoundedKind::bf16) {
    for (size_t j = 0; j < n; ++j) {
      bfloat16 h;
      std::memcpy(&h, reinterpret_cast<const char*>(rounded_out.data()) + j * sizeof h, sizeof h);
      out.rounded.push_back(static_cast<float>(h));
    }
  }
  return out;
}

void expect_same_bits(const Outputs& got, const Outputs& want) {
  EXPECT_TRUE(same_bits(got.w, want.w));
  ASSERT_EQ(got.slots.size(), want.slots.size());
  for (size_t k = 0; k < got.slots.size(); ++k) {
    EXPECT_TRUE(same_bits(got.slots[k], want.slots[k])) << "slot " << k;
  }
  EXPECT_TRUE(same_bits(got.rounded, want.rounded));
}

TEST(OptimizerSumOfTwo, WritesTheBitsOfApplyOnTheSum) {
  for (const Case& c : cases()) {
    for (size_t n : {size_t{1}, size_t{13}, size_t{314}, size_t{2049}}) {
      for (RoundedKind kind : {RoundedKind::none, RoundedKind::values, RoundedKind::bf16}) {
        for (bool bf16_terms : {false, true}) {
          SCOPED_TRACE(c.name + " n=" + std::to_string(n) + " rounded copy " +
                       std::to_string(static_cast<int>(kind)) +
                       (bf16_terms ? " bfloat16 terms" : ""));
          const Outputs fused = run_update(c, n, true, kind, {}, bf16_terms);
          const Outputs unfused = run_update(c, n, false, kind, {}, bf16_terms);
          expect_same_bits(fused, unfused);
          // Rounding the terms changed the update: the test above is not comparing nothing.
          if (bf16_terms && n > 1) {
            EXPECT_FALSE(same_bits(fused.w, run_update(c, n, true, kind).w));
          }
        }
      }
    }
  }
}

// The step streams the outputs of an update larger than the caches (BufferedUpdate): the rule
// then runs block by block into a buffer that goes out with non-temporal stores, and must write
// the bits of the ordinary loop — for every optimizer, both paths, either form of the rounded
// copy, any length (whole blocks, a short last block, an odd count of bfloat16, less than one
// register) and outputs aligned for those stores or not (then copied ordinarily). The isa label
// runs it on every build's store width.
TEST(OptimizerSumOfTwo, StreamedOutputsHoldTheBitsOfStoredOnes) {
  const std::vector<distribute::Streamed> ways = {{.weights = true, .slots = true, .rounded = true},
                                                  {.weights = true},
                                                  {.slots = true},
                                                  {.rounded = true}};
  for (const Case& c : cases()) {
    for (size_t n : {size_t{1}, size_t{13}, size_t{64}, size_t{314}, size_t{2049}}) {
      for (int path : {0, 1, 2}) {  // fused, summed first, fused on bfloat16 terms
        const bool fused = path != 1, bf16_terms = path == 2;
        for (RoundedKind kind : {RoundedKind::none, RoundedKind::values, RoundedKind::bf16}) {
          const Outputs stored = run_update(c, n, fused, kind, {}, bf16_terms);
          for (size_t shift : {size_t{0}, size_t{3}}) {
            for (const distribute::Streamed& way : ways) {
              SCOPED_TRACE(::testing::Message()
                           << c.name << " n=" << n << (fused ? " fused" : " summed first")
                           << (bf16_terms ? " on bfloat16 terms" : "") << " rounded copy "
                           << static_cast<int>(kind) << " shift " << shift
                           << (way.weights ? " weights" : "") << (way.slots ? " slots" : "")
                           << (way.rounded ? " rounded" : ""));
              expect_same_bits(run_update(c, n, fused, kind, {shift, way}, bf16_terms), stored);
            }
          }
        }
      }
    }
  }
}

// The fused result is the rule on the sum: a float64 Adam step on a + b, written here, agrees to
// float32 rounding (a step on one term alone would miss by ~lr).
TEST(OptimizerSumOfTwo, AdamFollowsTheRuleOnTheSum) {
  const size_t n = 257;
  const Outputs fused = run_update(cases()[0], n, true, RoundedKind::none);
  const std::vector<float> w = random_values(n, 1.0f, 2);
  const std::vector<float> a = random_values(n, 0.1f, 3);
  const std::vector<float> b = random_values(n, 0.1f, 4);
  std::vector<float> m0 = random_values(n, 0.01f, 10), v0 = random_values(n, 0.01f, 11);
  for (float& x : m0) x = std::abs(x);
  for (float& x : v0) x = std::abs(x);
  const double lr = 0.001, b1 = 0.9, b2 = 0.999, eps = 1e-7;
  const double alpha = lr * std::sqrt(1.0 - b2) / (1.0 - b1);  // step 1
  for (size_t j = 0; j < n; ++j) {
    const double g = static_cast<double>(a[j]) + b[j];
    const double m = m0[j] + (g - m0[j]) * (1.0 - b1);
    const double v = v0[j] + (g * g - v0[j]) * (1.0 - b2);
    const double expected = w[j] - m * alpha / (std::sqrt(v) + eps);
    ASSERT_NEAR(fused.w[j], expected, 1e-6 * (1.0 + std::abs(expected))) << "element " << j;
    ASSERT_NEAR(fused.slots[0][j], m, 1e-6) << "element " << j;
    ASSERT_NEAR(fused.slots[1][j], v, 1e-7) << "element " << j;
  }
}

// Adam's loop is built for x86-64, x86-64-v3 and x86-64-v4 (core/cpu_dispatch.h); every build must
// give the bits of the scalar float32 rule, so that weights do not depend on the CPU. The isa
// label runs this under every cap; here the rule is written out in float32 in Keras' epsilon-hat
// form, in the library's order of operations (this file is compiled without FMA contraction).
TEST(OptimizerSumOfTwo, AdamsLoopGivesTheScalarRulesBitsOnEveryIsa) {
  for (size_t n : {size_t{1}, size_t{13}, size_t{314}, size_t{2049}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    for (RoundedKind kind : {RoundedKind::none, RoundedKind::values, RoundedKind::bf16}) {
      const Outputs got = run_update(cases()[0], n, false, kind);
      const std::vector<float> w = random_values(n, 1.0f, 2);
      const std::vector<float> a = random_values(n, 0.1f, 3);
      const std::vector<float> b = random_values(n, 0.1f, 4);
      std::vector<float> m0 = random_values(n, 0.01f, 10), v0 = random_values(n, 0.01f, 11);
      const double lr = 0.001, b1 = 0.9, b2 = 0.999;
      const float alpha = static_cast<float>(lr * std::sqrt(1.0 - b2) / (1.0 - b1));  // step 1
      const float one_minus_b1 = static_cast<float>(1.0 - b1);
      const float one_minus_b2 = static_cast<float>(1.0 - b2), eps = 1e-7f;
      std::vector<float> want_w(n), want_m(n), want_v(n), want_rounded(n);
      for (size_t j = 0; j < n; ++j) {
        const float g = a[j] + b[j], m = std::abs(m0[j]), v = std::abs(v0[j]);
        want_m[j] = m + (g - m) * one_minus_b1;
        want_v[j] = v + (g * g - v) * one_minus_b2;
        want_w[j] = w[j] - want_m[j] * alpha / (std::sqrt(want_v[j]) + eps);
        want_rounded[j] = static_cast<float>(bfloat16(want_w[j]));
      }
      EXPECT_TRUE(same_bits(got.w, want_w));
      EXPECT_TRUE(same_bits(got.slots[0], want_m));
      EXPECT_TRUE(same_bits(got.slots[1], want_v));
      EXPECT_TRUE(kind == RoundedKind::none || same_bits(got.rounded, want_rounded));
    }
  }
}

}  // namespace
}  // namespace lockstep::keras::optimizers
