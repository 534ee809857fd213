// Variable::bfloat16_rounded: the cached copy of a float32 variable rounded to bfloat16 values
// (used by mixed_bfloat16 Dense), checked against a rounding written here, and its invalidation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "lockstep/autodiff/variable.h"
#include "testing/bfloat16_reference.h"

namespace lockstep {
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

TEST(VariableBfloat16Rounded, IsTheRoundingOfTheValueBitForBit) {
  Variable v(sample_values(1000, 0.25f).reshape({25, 40}), "w");
  EXPECT_EQ(v.bfloat16_rounded_data(), nullptr);  // nothing cached until first use
  Tensor r = v.bfloat16_rounded();
  expect_rounded(v, r);
  EXPECT_FALSE(r.shares_storage_with(v.raw_value()));
  EXPECT_EQ(v.bfloat16_rounded_data(), r.data<float>());
}

TEST(VariableBfloat16Rounded, AssignmentsInvalidateItAndTheNextReadRecomputes) {
  Variable v(sample_values(300, 0.0f), "w");
  const float* cached = v.bfloat16_rounded().data<float>();
  v.assign(sample_values(300, 1.5f));
  EXPECT_EQ(v.bfloat16_rounded_data(), nullptr);
  expect_rounded(v, v.bfloat16_rounded());
  EXPECT_EQ(v.bfloat16_rounded().data<float>(), cached);  // the same buffer, rewritten

  v.assign_add(Tensor::full({300}, 0.001, DType::float32));
  EXPECT_EQ(v.bfloat16_rounded_data(), nullptr);
  expect_rounded(v, v.bfloat16_rounded());

  v.assign_sub(Tensor::full({300}, 0.3, DType::float32));
  EXPECT_EQ(v.bfloat16_rounded_data(), nullptr);
  expect_rounded(v, v.bfloat16_rounded());
}

TEST(VariableBfloat16Rounded, CopiesOfTheHandleShareTheCache) {
  Variable v(sample_values(64, 0.0f), "w");
  Variable alias = v;
  Tensor r = v.bfloat16_rounded();
  EXPECT_EQ(alias.bfloat16_rounded_data(), r.data<float>());
  alias.assign(sample_values(64, 2.0f));
  EXPECT_EQ(v.bfloat16_rounded_data(), nullptr);
  expect_rounded(v, v.bfloat16_rounded());
}

TEST(VariableBfloat16Rounded, ConcurrentFirstReadsAgree) {
  Variable v(sample_values(100000, 0.5f), "w");
  std::vector<const float*> seen(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < seen.size(); ++t) {
    threads.emplace_back([&, t] { seen[t] = v.bfloat16_rounded().data<float>(); });
  }
  for (auto& t : threads) t.join();
  for (const float* p : seen) EXPECT_EQ(p, seen[0]);
  expect_rounded(v, v.bfloat16_rounded());
}

TEST(VariableBfloat16Rounded, OnlyFloat32Variables) {
  Variable d(Tensor::zeros({3}, DType::float64), "d");
  EXPECT_THROW(d.bfloat16_rounded(), InvalidArgument);
  EXPECT_EQ(d.bfloat16_rounded_data(), nullptr);
}

}  // namespace
}  // namespace lockstep
