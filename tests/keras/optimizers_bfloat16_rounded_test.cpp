// Optimizers keep a variable's bfloat16-rounded copy (mixed_precision::rounded_weights or
// bfloat16_weights, used by mixed_bfloat16 Dense) current as they update the weights: after every
// step the copy is the rounding of the new weights, and the weights are those of the same
// optimizer without a copy.
#include <gtest/gtest.h>

#include "lockstep/keras/mixed_precision.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "lockstep/keras/optimizers.h"
#include "optimizer_update_in_ranges.h"
#include "testing/bfloat16_reference.h"
#include "testing/paired_layout.h"

namespace lockstep::keras::optimizers {
namespace {

using lockstep::testing::float_bits;
using lockstep::testing::reference_round_to_bfloat16;

Tensor wave(int64_t n, float freq, float amp) {
  Tensor t({n}, DType::float32);
  for (int64_t i = 0; i < n; ++i) {
    t.data<float>()[i] = amp * std::sin(freq * static_cast<float>(i + 1));
  }
  return t;
}

// Sizes: several 1024-element chunks plus a tail, and one smaller than a chunk.
std::vector<Variable> make_vars() {
  return {Variable(wave(5000, 0.11f, 0.5f), "dense/kernel"),
          Variable(wave(37, 0.7f, 0.1f), "dense/bias")};
}

std::vector<Tensor> grads_for_step(int step) {
  const float s = static_cast<float>(step);
  return {wave(5000, 0.013f * (s + 1.0f), 2.0f), wave(37, 0.29f * (s + 1.0f), 1.0f)};
}

using Factory = std::function<std::unique_ptr<Optimizer>()>;

// The kernel of make_vars() as a 50 x 100 matrix in pairs of rows interleaved, in tiles of 8 x 16
// (both extents padded: 56 x 112), the tiles along the columns outermost — as oneDNN's BA16a...b2a
// weights are, with smaller tiles so that rows and columns both end inside one.
const PairedRowsLayout kPaired = lockstep::testing::tiled_paired_layout(50, 100, 8, 16);

// The same kernel as an 8 x 625 matrix, in tiles of 4 x 64 (columns padded to 640): a pair's rows
// are longer than the buffer the update rounds them into, so they go through it in parts, the
// last one shorter.
const PairedRowsLayout kWidePaired = lockstep::testing::tiled_paired_layout(8, 625, 4, 64);

// Runs `steps` steps with and without the rounded copies (float32 values, or `bfloat16_copy`) and
// compares; `split` applies each step as three ranges on three threads, as replicas do. `paired`:
// the kernel's bfloat16 copy is kept in that layout (the ranges then cut its pairs of rows).
// `streamed`: the split ranges write the copy around the caches, as the step asks on some CPUs.
void check_keeps_copies_current(const Factory& make, bool split, bool bfloat16_copy = false,
                                const PairedRowsLayout* paired = nullptr, bool streamed = false) {
  SCOPED_TRACE(paired != nullptr ? "paired bfloat16 copy"
               : bfloat16_copy   ? "bfloat16 copy"
                                 : "float32 copy");
  SCOPED_TRACE(streamed ? "streamed" : "stored");
  std::vector<Variable> plain = make_vars(), cached = make_vars();
  const Shape matrix = paired != nullptr ? Shape{paired->rows, paired->cols} : Shape{};
  if (paired != nullptr) {
    plain[0] = Variable(plain[0].value().reshape(matrix), "dense/kernel");
    cached[0] = Variable(cached[0].value().reshape(matrix), "dense/kernel");
    ASSERT_TRUE(mixed_precision::paired_bfloat16_weights(cached[0], *paired).defined());
  }
  for (const Variable& v : cached) {
    if (paired != nullptr && v.same_as(cached[0])) continue;
    if (bfloat16_copy) {
      mixed_precision::bfloat16_weights(v);
    } else {
      mixed_precision::rounded_weights(v);
    }
  }
  auto opt_plain = make(), opt_cached = make();
  opt_plain->build(plain);
  opt_cached->build(cached);
  int64_t total = 0;
  for (const Variable& v : cached) total += v.num_elements();
  for (int step = 0; step < 4; ++step) {
    std::vector<Tensor> g = grads_for_step(step);
    if (paired != nullptr) g[0] = g[0].reshape(matrix);
    opt_plain->apply_gradients(g, plain);
    if (!split) {
      opt_cached->apply_gradients(g, cached);
    } else {
      update_in_ranges(*opt_cached, g, cached, {0, 1700, 4999, total},
                       distribute::Streamed{.rounded = streamed});
    }
    for (size_t i = 0; i < cached.size(); ++i) {
      const float* w = cached[i].raw_value().data<float>();
      const float* ref = plain[i].raw_value().data<float>();
      const distribute::RoundedOut r = mixed_precision::rounded_weights_out(cached[i]);
      const bool in_pairs = paired != nullptr && i == 0;
      ASSERT_TRUE(bfloat16_copy || in_pairs ? r.bf16 != nullptr : r.values != nullptr)
          << "step " << step << ": the copy of " << cached[i].name() << " went stale";
      ASSERT_EQ(r.layout, in_pairs ? paired : nullptr);
      std::vector<bool> written(in_pairs ? static_cast<size_t>(paired->size) : 0);
      for (int64_t j = 0; j < cached[i].num_elements(); ++j) {
        ASSERT_EQ(float_bits(w[j]), float_bits(ref[j]))
            << cached[i].name() << "[" << j << "] step " << step;
        int64_t at = j;
        if (in_pairs) {
          at = paired->offset(j / paired->cols, j % paired->cols);
          written[static_cast<size_t>(at)] = true;
        }
        // A bfloat16 holds the upper half of the float it rounds to.
        const uint32_t got =
            bfloat16_copy || in_pairs ? uint32_t{r.bf16[at].bits} << 16 : float_bits(r.values[j]);
        ASSERT_EQ(got, float_bits(reference_round_to_bfloat16(w[j])))
            << cached[i].name() << "[" << j << "] step " << step;
      }
      // The layout's padding stays zero.
      for (size_t at = 0; at < written.size(); ++at) {
        if (!written[at]) {
          ASSERT_EQ(r.bf16[at].bits, 0) << "padding element " << at;
        }
      }
    }
  }
}

TEST(OptimizerBfloat16Rounded, AdamUpdatesTheCopyInTheUnclippedPath) {
  check_keeps_copies_current([] { return std::make_unique<Adam>(AdamOptions{}); }, false);
}

TEST(OptimizerBfloat16Rounded, SgdWithClipvalueUpdatesTheCopyInTheChunkedPath) {
  check_keeps_copies_current(
      [] { return std::make_unique<SGD>(SGDOptions{.momentum = 0.9, .base = {.clipvalue = 0.5}}); },
      false);
}

TEST(OptimizerBfloat16Rounded, AdamWWeightDecayUpdatesTheCopy) {
  check_keeps_copies_current([] { return std::make_unique<AdamW>(AdamWOptions{}); }, false);
}

TEST(OptimizerBfloat16Rounded, RangesOnSeveralThreadsUpdateTheCopy) {
  check_keeps_copies_current([] { return std::make_unique<Adam>(AdamOptions{}); }, true);
  check_keeps_copies_current([] { return std::make_unique<RMSprop>(RMSpropOptions{}); }, true);
}

TEST(OptimizerBfloat16Rounded, TheBfloat16CopyIsKeptCurrentInEveryPath) {
  check_keeps_copies_current([] { return std::make_unique<Adam>(AdamOptions{}); }, false, true);
  check_keeps_copies_current(
      [] { return std::make_unique<SGD>(SGDOptions{.momentum = 0.9, .base = {.clipvalue = 0.5}}); },
      false, true);
  check_keeps_copies_current([] { return std::make_unique<AdamW>(AdamWOptions{}); }, false, true);
  check_keeps_copies_current([] { return std::make_unique<Adam>(AdamOptions{}); }, true, true);
}

// Every path keeps a copy in pairs of rows current too, whole or cut into ranges that end inside
// a pair (another thread writes the pair's other row).
TEST(OptimizerBfloat16Rounded, ACopyInPairsOfRowsIsKeptCurrentInEveryPath) {
  check_keeps_copies_current([] { return std::make_unique<Adam>(AdamOptions{}); }, false, true,
                             &kPaired);
  check_keeps_copies_current(
      [] { return std::make_unique<SGD>(SGDOptions{.momentum = 0.9, .base = {.clipvalue = 0.5}}); },
      false, true, &kPaired);
  check_keeps_copies_current([] { return std::make_unique<Adam>(AdamOptions{}); }, true, true,
                             &kPaired);
  check_keeps_copies_current([] { return std::make_unique<RMSprop>(RMSpropOptions{}); }, true, true,
                             &kPaired);
}

// Rows longer than the update's buffer: each pair goes through it in parts, whole or cut into
// ranges.
TEST(OptimizerBfloat16Rounded, ACopyInPairsOfLongRowsIsKeptCurrent) {
  const Factory adam = [] { return std::make_unique<Adam>(AdamOptions{}); };
  check_keeps_copies_current(adam, false, true, &kWidePaired);
  check_keeps_copies_current(adam, true, true, &kWidePaired);
  check_keeps_copies_current(
      [] { return std::make_unique<SGD>(SGDOptions{.momentum = 0.9, .base = {.clipvalue = 0.5}}); },
      true, true, &kWidePaired);
}

// Written around the caches (whole pairs of rows a tile's run at a time, the ends of a range
// stored), the plain copy and the one in pairs of rows hold the same values.
TEST(OptimizerBfloat16Rounded, AStreamedCopyIsKeptCurrent) {
  const Factory adam = [] { return std::make_unique<Adam>(AdamOptions{}); };
  check_keeps_copies_current(adam, true, true, &kPaired, true);
  check_keeps_copies_current(adam, true, true, &kWidePaired, true);
  check_keeps_copies_current(adam, true, true, nullptr, true);
  check_keeps_copies_current(adam, true, false, nullptr, true);
}

TEST(OptimizerBfloat16Rounded, AVariableWithoutACopyGetsNone) {
  std::vector<Variable> vars = make_vars();
  Adam opt;
  opt.apply_gradients(grads_for_step(0), vars);
  for (const Variable& v : vars) EXPECT_FALSE(mixed_precision::rounded_weights_out(v)) << v.name();
}

}  // namespace
}  // namespace lockstep::keras::optimizers
