// add_into / sub_into: the library's one in-place elementwise add, against sums written out here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/error.h"
#include "lockstep/ops/elementwise.h"

namespace lockstep {
namespace {

TEST(AddInto, AddsAndSubtractsInPlaceForEveryDtypeItTakes) {
  Tensor f = Tensor::from_vector<float>({1.5f, -2.0f, 0.25f}, {3});
  ops::add_into(f, Tensor::from_vector<float>({0.5f, 2.0f, 1.0f}, {3}));
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{2.0f, 0.0f, 1.25f}));
  ops::sub_into(f, Tensor::from_vector<float>({1.0f, 1.0f, 1.0f}, {3}));
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1.0f, -1.0f, 0.25f}));

  Tensor d = Tensor::from_vector<double>({1e-17, 1.0}, {2});
  ops::add_into(d, Tensor::from_vector<double>({1.0, 1e-17}, {2}));
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{1.0 + 1e-17, 1.0 + 1e-17}));

  // Integers add in their own type: 2^40 + 1 is not representable in float.
  Tensor i64 = Tensor::from_vector<int64_t>({int64_t{1} << 40, -3}, {2});
  ops::add_into(i64, Tensor::from_vector<int64_t>({1, 5}, {2}));
  EXPECT_EQ(i64.to_vector<int64_t>(), (std::vector<int64_t>{(int64_t{1} << 40) + 1, 2}));
  Tensor i32 = Tensor::from_vector<int32_t>({7, 0}, {2});
  ops::sub_into(i32, Tensor::from_vector<int32_t>({10, -4}, {2}));
  EXPECT_EQ(i32.to_vector<int32_t>(), (std::vector<int32_t>{-3, 4}));
}

TEST(AddInto, Bfloat16AddsInFloat32AndRoundsOnce) {
  // The float32 sums are exact; each is a tie between two bfloat16 neighbours, which rounding to
  // nearest even resolves downwards.
  Tensor b = Tensor::from_vector<float>({1.0f, 256.0f}, {2}).to(DType::bfloat16);
  ops::add_into(b, Tensor::from_vector<float>({0.00390625f, 1.0f}, {2}).to(DType::bfloat16));
  const std::vector<float> got = b.to(DType::float32).to_vector<float>();
  EXPECT_EQ(got[0], 1.0f);    // 1 + 2^-8 ties to the even neighbour 1
  EXPECT_EQ(got[1], 256.0f);  // 257 is not a bfloat16 (8 significant bits): ties to even 256
}

TEST(AddInto, RawFloatLoopAddsEveryElement) {
  std::vector<float> dst = {1, 2, 3, 4, 5};
  const std::vector<float> src = {10, 20, 30, 40, 50};
  ops::add_into(dst.data(), src.data(), 4);
  EXPECT_EQ(dst, (std::vector<float>{11, 22, 33, 44, 5}));
}

TEST(AddInto, RefusesAnotherShapeOrDtypeNamingBoth) {
  Tensor dst = Tensor::zeros({2, 3});
  try {
    ops::add_into(dst, Tensor::zeros({3, 2}));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("add_into"));
    EXPECT_THAT(e.what(), testing::HasSubstr("[2, 3]"));
    EXPECT_THAT(e.what(), testing::HasSubstr("[3, 2]"));
  }
  EXPECT_THROW(ops::sub_into(dst, Tensor::zeros({2, 3}, DType::float64)), InvalidArgument);
}

// The in-place sum rewrites the matrix, so a transposed copy written beside it is stale after it.
TEST(AddInto, ForgetsAMatrixsTransposedCopy) {
  for (bool subtract : {false, true}) {
    Tensor m = Tensor::with_room_for_transpose(2, 3, DType::float32);
    m.copy_from(Tensor::zeros({2, 3}));
    m.transpose_room().copy_from(Tensor::zeros({3, 2}));
    m.mark_transposed_copy();
    ASSERT_TRUE(m.transposed_copy().defined());
    if (subtract) {
      ops::sub_into(m, Tensor::ones({2, 3}));
    } else {
      ops::add_into(m, Tensor::ones({2, 3}));
    }
    EXPECT_FALSE(m.transposed_copy().defined()) << (subtract ? "sub_into" : "add_into");
  }
}

}  // namespace
}  // namespace lockstep
