// mixed_precision::rounded_weights and bfloat16_weights: the policy's copies of a float32 variable
// rounded to bfloat16 (as float32 values or as bfloat16; used by mixed_bfloat16 Dense), checked
// against a rounding written here; their invalidation by writes, and their double buffering with
// the variable's buffers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/autodiff/variable.h"
#include "lockstep/keras/mixed_precision.h"
#include "testing/bfloat16_reference.h"

namespace lockstep::keras::mixed_precision {
namespace {

using lockstep::testing::float_bits;
using lockstep::testing::reference_round_to_bfloat16;

Tensor sample_values(int64_t n, float shift) {
  Tensor t({n}, DType::float32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f + shift;
  // Exact ties (0x8000 below the cut, even and odd kept parts), infinities, NaN, a subnormal.
  const uint32_t specials[] = {0x3f808000u, 0x3f818000u, 0x7f800000u, 0xff800000u,
                               0x7fc00001u, 0x00000001u, 0x80000000u};
  for (size_t i = 0; i < std::size(specials) && static_cast<int64_t>(i) < n; ++i) {
    std::memcpy(&p[i], &specials[i], sizeof(float));
  }
  return t;
}

// The float32 copy in use, or nullptr.
const float* rounded_values(const Variable& v) {
  return rounded_weights_out(v).values;
}

void expect_rounded(const Variable& v, const Tensor& rounded) {
  ASSERT_EQ(rounded.shape(), v.shape());
  ASSERT_EQ(rounded.dtype(), DType::float32);
  const float* w = v.raw_value().data<float>();
  const float* r = rounded.data<float>();
  for (int64_t i = 0; i < v.num_elements(); ++i) {
    ASSERT_EQ(float_bits(r[i]), float_bits(reference_round_to_bfloat16(w[i])))
        << "element " << i << " of " << w[i];
  }
}

TEST(RoundedWeights, IsTheRoundingOfTheValueBitForBit) {
  Variable v(sample_values(1000, 0.25f).reshape({25, 40}), "w");
  EXPECT_EQ(rounded_values(v), nullptr);  // nothing cached until first use
  Tensor r = rounded_weights(v);
  expect_rounded(v, r);
  EXPECT_FALSE(r.shares_storage_with(v.raw_value()));
  EXPECT_EQ(rounded_values(v), r.data<float>());
}

TEST(RoundedWeights, AssignmentsInvalidateItAndTheNextReadRecomputes) {
  Variable v(sample_values(300, 0.0f), "w");
  const float* cached = rounded_weights(v).data<float>();
  v.assign(sample_values(300, 1.5f));
  EXPECT_EQ(rounded_values(v), nullptr);
  expect_rounded(v, rounded_weights(v));
  EXPECT_EQ(rounded_weights(v).data<float>(), cached);  // the same buffer, rewritten

  v.assign_add(Tensor::full({300}, 0.001, DType::float32));
  EXPECT_EQ(rounded_values(v), nullptr);
  expect_rounded(v, rounded_weights(v));

  v.assign_sub(Tensor::full({300}, 0.3, DType::float32));
  EXPECT_EQ(rounded_values(v), nullptr);
  expect_rounded(v, rounded_weights(v));
}

TEST(RoundedWeights, CopiesOfTheHandleShareTheCache) {
  Variable v(sample_values(64, 0.0f), "w");
  Variable alias = v;
  Tensor r = rounded_weights(v);
  EXPECT_EQ(rounded_values(alias), r.data<float>());
  alias.assign(sample_values(64, 2.0f));
  EXPECT_EQ(rounded_values(v), nullptr);
  expect_rounded(v, rounded_weights(v));
}

TEST(RoundedWeights, ConcurrentFirstReadsAgree) {
  Variable v(sample_values(100000, 0.5f), "w");
  std::vector<const float*> seen(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < seen.size(); ++t) {
    threads.emplace_back([&, t] { seen[t] = rounded_weights(v).data<float>(); });
  }
  for (auto& t : threads) t.join();
  for (const float* p : seen) EXPECT_EQ(p, seen[0]);
  expect_rounded(v, rounded_weights(v));
}

TEST(RoundedWeights, OnlyFloat32Variables) {
  Variable d(Tensor::zeros({3}, DType::float64), "d");
  EXPECT_THROW(rounded_weights(d), InvalidArgument);
  EXPECT_EQ(rounded_values(d), nullptr);
}

// The replicated step's protocol: the update writes the next buffer's rounding while the current
// copy is in use, and flipping the buffers makes it current; a flip without that write leaves the
// new buffer's copy stale (recomputed on the next read), never wrong.
TEST(RoundedWeights, FollowTheVariablesBuffers) {
  Variable v(sample_values(500, 0.0f), "w");
  v.enable_next_buffer();
  EXPECT_EQ(next_rounded_weights_out(v).values,
            nullptr);  // no copy in use: nothing to keep current
  const float* first = rounded_weights(v).data<float>();

  // An update into the next buffer that writes the rounding too.
  const Tensor next_values = sample_values(500, 0.75f);
  v.next_value().copy_from(next_values);
  float* next = next_rounded_weights_out(v).values;
  ASSERT_NE(next, nullptr);
  ASSERT_NE(next, first);
  const float* src = next_values.data<float>();
  for (int64_t i = 0; i < 500; ++i) next[i] = reference_round_to_bfloat16(src[i]);
  v.flip_buffers();
  EXPECT_EQ(rounded_values(v), next);  // current without a recomputation
  expect_rounded(v, rounded_weights(v));

  // An update that does not write it: the flipped-in copy is stale and recomputed on use.
  v.next_value().copy_from(sample_values(500, -2.0f));
  v.flip_buffers();
  EXPECT_EQ(rounded_values(v), nullptr);
  expect_rounded(v, rounded_weights(v));
}

void expect_bfloat16(const Variable& v, const Tensor& copy) {
  ASSERT_EQ(copy.shape(), v.shape());
  ASSERT_EQ(copy.dtype(), DType::bfloat16);
  const float* w = v.raw_value().data<float>();
  const bfloat16* b = copy.data<bfloat16>();
  for (int64_t i = 0; i < v.num_elements(); ++i) {
    // A bfloat16 holds the upper half of the float it rounds to.
    ASSERT_EQ(uint32_t{b[i].bits} << 16, float_bits(reference_round_to_bfloat16(w[i])))
        << "element " << i << " of " << w[i];
  }
}

TEST(Bfloat16Weights, IsTheCastOfTheValueBitForBitAndFollowsAssignments) {
  Variable v(sample_values(1000, 0.25f).reshape({25, 40}), "w");
  EXPECT_FALSE(rounded_weights_out(v));
  Tensor b = bfloat16_weights(v);
  expect_bfloat16(v, b);
  EXPECT_EQ(rounded_weights_out(v).bf16, b.data<bfloat16>());
  EXPECT_EQ(rounded_weights_out(v).values, nullptr);
  v.assign(sample_values(1000, -1.5f).reshape({25, 40}));
  EXPECT_FALSE(rounded_weights_out(v));
  expect_bfloat16(v, bfloat16_weights(v));
  Variable d(Tensor::zeros({3}, DType::float64), "d");
  EXPECT_THROW(bfloat16_weights(d), InvalidArgument);
}

// The replicated step's protocol with the bfloat16 copy: the update writes the next buffer's
// copy and the flip makes it current; with both kinds in use the update keeps the bfloat16 one
// and the float32 one is recomputed on its next read.
TEST(Bfloat16Weights, FollowTheVariablesBuffers) {
  Variable v(sample_values(500, 0.0f), "w");
  v.enable_next_buffer();
  const bfloat16* first = bfloat16_weights(v).data<bfloat16>();
  const Tensor next_values = sample_values(500, 0.75f);
  v.next_value().copy_from(next_values);
  const distribute::RoundedOut next = next_rounded_weights_out(v);
  ASSERT_NE(next.bf16, nullptr);
  ASSERT_EQ(next.values, nullptr);
  ASSERT_NE(next.bf16, first);
  const float* src = next_values.data<float>();
  for (int64_t i = 0; i < 500; ++i) next.bf16[i] = bfloat16(src[i]);
  v.flip_buffers();
  EXPECT_EQ(rounded_weights_out(v).bf16, next.bf16);  // current without a recomputation
  expect_bfloat16(v, bfloat16_weights(v));

  rounded_weights(v);  // both kinds in use now
  v.next_value().copy_from(sample_values(500, -2.0f));
  const distribute::RoundedOut both = next_rounded_weights_out(v);
  ASSERT_NE(both.bf16, nullptr);
  for (int64_t i = 0; i < 500; ++i) both.bf16[i] = bfloat16(v.next_value().data<float>()[i]);
  v.flip_buffers();
  EXPECT_EQ(rounded_weights_out(v).values, nullptr) << "the float32 copy was not written";
  expect_rounded(v, rounded_weights(v));
  expect_bfloat16(v, bfloat16_weights(v));
}

// A spare swapped in for the handed-out copy (what the step does when a backup run won part of
// the update) is what the flip makes current; the old copy comes back as the spare. A spare of
// another dtype or shape, or a swap with no copy handed out, is refused with both named.
TEST(Bfloat16Weights, ASpareSwappedInBeforeTheFlipBecomesTheCopy) {
  Variable v(sample_values(500, 0.0f), "w");
  v.enable_next_buffer();
  bfloat16_weights(v);
  Tensor none(v.shape(), DType::bfloat16);
  EXPECT_THROW(swap_next_rounded_weights(v, none), FailedPrecondition) << "nothing handed out";
  v.next_value().copy_from(sample_values(500, 0.75f));
  const distribute::RoundedOut next = next_rounded_weights_out(v);
  ASSERT_NE(next.bf16, nullptr);
  Tensor wrong(v.shape(), DType::float32);
  try {
    swap_next_rounded_weights(v, wrong);
    ADD_FAILURE() << "a float32 spare for a bfloat16 copy was accepted";
  } catch (const FailedPrecondition& e) {
    EXPECT_NE(std::string(e.what()).find("bfloat16[500]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("float32[500]"), std::string::npos) << e.what();
  }
  Tensor spare(v.shape(), DType::bfloat16);
  const float* src = v.next_value().data<float>();
  for (int64_t i = 0; i < 500; ++i) spare.data<bfloat16>()[i] = bfloat16(src[i]);
  bfloat16* spare_data = spare.data<bfloat16>();
  swap_next_rounded_weights(v, spare);
  EXPECT_EQ(spare.data<bfloat16>(), next.bf16) << "the old copy comes back as the spare";
  v.flip_buffers();
  EXPECT_EQ(rounded_weights_out(v).bf16, spare_data);
  expect_bfloat16(v, bfloat16_weights(v));
}

}  // namespace
}  // namespace lockstep::keras::mixed_precision
