#include "lockstep/core/tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/random.h"
#include "lockstep/core/storage.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

TEST(Tensor, StorageIs64ByteAligned) {
  for (int64_t n : {1, 3, 17, 1000}) {
    Tensor t({n}, DType::float32);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
  }
}

TEST(Tensor, SliceAlongAxis0IsAViewWithoutCopy) {
  Tensor t = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {3, 2});
  Tensor s = t.slice(1, 3);
  EXPECT_EQ(s.shape(), Shape({2, 2}));
  EXPECT_TRUE(s.shares_storage_with(t));
  EXPECT_EQ(s.data<float>(), t.data<float>() + 2);
  s.data<float>()[0] = 42;
  EXPECT_EQ(t.at(2), 42);
  EXPECT_EQ(t.row(2).to_vector<float>(), (std::vector<float>{4, 5}));
}

TEST(Tensor, ReshapeInfersMinusOneAndKeepsStorage) {
  Tensor t = Tensor::zeros({4, 6});
  Tensor r = t.reshape({-1, 3});
  EXPECT_EQ(r.shape(), Shape({8, 3}));
  EXPECT_TRUE(r.shares_storage_with(t));
  EXPECT_NE(r.id(), t.id());
}

TEST(Tensor, ReshapeToWrongElementCountNamesBothShapes) {
  Tensor t = Tensor::zeros({4, 6});
  try {
    t.reshape(Shape{5, 5});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("[4, 6]"));
    EXPECT_THAT(e.what(), HasSubstr("[5, 5]"));
  }
}

TEST(Tensor, WrongDtypeAccessNamesTheDtypes) {
  Tensor t = Tensor::zeros({2}, DType::int32);
  try {
    (void)t.data<float>();
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("float32"));
    EXPECT_THAT(e.what(), HasSubstr("int32[2]"));
  }
}

TEST(Tensor, CopiesShareIdentityViewsDoNot) {
  Tensor a = Tensor::zeros({3});
  Tensor b = a;
  EXPECT_EQ(a.id(), b.id());
  EXPECT_NE(a.clone().id(), a.id());
  EXPECT_NE(a.slice(0, 2).id(), a.id());
}

TEST(Tensor, ConversionsBetweenDtypes) {
  Tensor t = Tensor::from_vector<float>({1.5f, -2.0f, 300.0f}, {3});
  EXPECT_EQ(t.to(DType::int32).to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 300}));
  EXPECT_EQ(t.to(DType::float64).to_vector<double>(), (std::vector<double>{1.5, -2.0, 300.0}));
  EXPECT_EQ(t.to(DType::bfloat16).to(DType::float32).to_vector<float>(),
            (std::vector<float>{1.5f, -2.0f, 300.0f}));
}

TEST(Tensor, SteadyStateAllocationReusesPooledBlocks) {
  { Tensor warm({123, 45}); }
  auto before = storage_pool_stats();
  for (int i = 0; i < 100; ++i) Tensor t({123, 45});
  auto after = storage_pool_stats();
  EXPECT_EQ(after.system_allocations, before.system_allocations);
  EXPECT_EQ(after.pool_hits - before.pool_hits, 100u);
}

// Reference rounding written independently: the float32 closest to x among bfloat16 values, with
// ties going to the value whose last mantissa bit is 0, computed in double.
float reference_bf16_round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  uint32_t lo_bits = u & 0xffff0000u;
  uint32_t hi_bits = lo_bits + 0x10000u;
  float lo, hi;
  std::memcpy(&lo, &lo_bits, 4);
  std::memcpy(&hi, &hi_bits, 4);
  double dlo = std::abs(static_cast<double>(x) - lo), dhi = std::abs(static_cast<double>(hi) - x);
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return ((lo_bits >> 16) & 1) ? hi : lo;
}

TEST(BFloat16, RoundsToNearestEven) {
  Generator g(7);
  for (int i = 0; i < 100000; ++i) {
    uint32_t bits = g.next_u32() & 0xbfffffffu;  // finite values away from the overflow edge
    float x;
    std::memcpy(&x, &bits, 4);
    EXPECT_EQ(static_cast<float>(bfloat16(x)), reference_bf16_round(x)) << "x=" << x;
  }
  // Exact ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7; the even neighbour is 1.
  EXPECT_EQ(static_cast<float>(bfloat16(1.0f + 0x1.0p-8f)), 1.0f);
  EXPECT_EQ(static_cast<float>(bfloat16(1.0f + 3 * 0x1.0p-8f)), 1.0f + 0x1.0p-6f);
}

TEST(BFloat16, KeepsNaNAndInfinity) {
  EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload lives only in the low bits must not round into infinity.
  uint32_t low_nan = 0x7f800001u;
  float f;
  std::memcpy(&f, &low_nan, 4);
  EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16(f))));
  EXPECT_TRUE(std::isinf(static_cast<float>(bfloat16(std::numeric_limits<float>::infinity()))));
}

TEST(Philox, MatchesTheKnownAnswerVectorsOfRandom123) {
  // Known-answer tests published with Random123 (kat_vectors, philox4x32_10).
  auto zero = philox4x32_10({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(zero, (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  auto ones =
      philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff});
  EXPECT_EQ(ones, (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  auto pi =
      philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0});
  EXPECT_EQ(pi, (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Generator, StateRoundTripContinuesTheSameSequence) {
  Generator a(42, 3);
  for (int i = 0; i < 7; ++i) a.next_u32();
  Generator b(0);
  b.set_state(a.state());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(a.next_u32(), b.next_u32());
}

// uniform_int(n) is the draw r % n of the first 64-bit draw r below the largest multiple of n
// (2^64 - 1 - (2^64 - 1) % n), the rule written out here on a twin generator's raw draws. Just
// above 2^63 about half the draws are redrawn, so the rejection path runs too.
TEST(Generator, UniformIntRedrawsAboveTheLargestMultipleOfN) {
  const uint64_t half = uint64_t{1} << 63;
  for (uint64_t n : {uint64_t{1}, uint64_t{3}, uint64_t{60000}, half - 1, half, half + 1,
                     half + 12345, UINT64_MAX - 1, UINT64_MAX}) {
    Generator g(7, n), twin(7, n);
    int redrawn = 0;
    for (int i = 0; i < 2000; ++i) {
      const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
      uint64_t r = twin.next_u64();
      for (; r >= limit; r = twin.next_u64()) ++redrawn;
      ASSERT_EQ(g.uniform_int(n), r % n) << "n = " << n << ", draw " << i;
    }
    if (n == half + 1) {
      EXPECT_GT(redrawn, 500) << "the rejection path was not exercised";
    }
  }
}

TEST(Generator, NormalHasUnitMomentsAndTruncatedStaysWithinTwoSigma) {
  Generator g(1);
  Tensor n = g.normal({200000}, 0.0, 1.0, DType::float64);
  double sum = 0, sq = 0;
  for (double v : n.to_vector<double>()) sum += v, sq += v * v;
  double mean = sum / 200000, var = sq / 200000 - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.02);
  Tensor t = g.truncated_normal({10000}, 1.0, 0.5);
  for (float v : t.to_vector<float>()) ASSERT_LE(std::abs(v - 1.0f), 1.0f);
}

// Tensors of 4 MiB or more sit in blocks that start on a 2 MiB boundary (the storage header, then
// the data), so the kernel can back them with transparent huge pages; smaller ones keep the
// 64-byte alignment.
TEST(TensorStorage, LargeTensorsStartOnAHugePageBoundary) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  for (int64_t elements : {int64_t{1} << 20, (int64_t{3} << 20) + 5}) {  // 4 MiB and 12 MiB + 20 B
    const Tensor t({elements}, DType::float32);
    const auto data = reinterpret_cast<uintptr_t>(t.raw_data());
    EXPECT_EQ((data - Storage::kAlignment) % kHuge, 0u) << elements << " floats";  // header: 64 B
  }
  const Tensor small({1000}, DType::float32);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.raw_data()) % Storage::kAlignment, 0u);
}

// A matrix's transposed copy (Tensor::with_room_for_transpose): found only through a handle on
// the whole matrix after the mark, and forgotten by the writers that rewrite the matrix.
TEST(TensorTransposedCopy, IsFoundOnlyOnTheWholeMarkedMatrix) {
  Tensor m = Tensor::with_room_for_transpose(3, 5, DType::bfloat16);
  ASSERT_EQ(m.shape(), Shape({3, 5}));
  EXPECT_FALSE(m.transposed_copy().defined()) << "not marked yet";
  Tensor room = m.transpose_room();
  ASSERT_EQ(room.shape(), Shape({5, 3}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(room.raw_data()) % Storage::kAlignment, 0u);
  // The room lies past the matrix's bytes: writing one does not touch the other.
  EXPECT_GE(static_cast<char*>(room.raw_data()), static_cast<char*>(m.raw_data()) + m.nbytes());
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      m.data<bfloat16>()[i * 5 + j] = bfloat16(static_cast<float>(10 * i + j));
      room.data<bfloat16>()[j * 3 + i] = bfloat16(static_cast<float>(10 * i + j));
    }
  }
  m.mark_transposed_copy();
  Tensor t = m.transposed_copy();
  ASSERT_TRUE(t.defined());
  EXPECT_EQ(t.shape(), Shape({5, 3}));
  EXPECT_EQ(t.raw_data(), room.raw_data());
  Tensor handle = m;  // a copy of the handle is the same matrix
  EXPECT_TRUE(handle.transposed_copy().defined());
  EXPECT_TRUE(m.reshape({3, 5}).transposed_copy().defined());
  EXPECT_FALSE(m.reshape({15}).transposed_copy().defined());
  EXPECT_FALSE(m.reshape({5, 3}).transposed_copy().defined());
  EXPECT_FALSE(m.slice(1, 3).transposed_copy().defined());
  EXPECT_FALSE(m.slice(0, 2).transposed_copy().defined());
  EXPECT_FALSE(m.view_as(DType::float32, {1, 2}).transposed_copy().defined());
  EXPECT_FALSE(Tensor({3, 5}, DType::bfloat16).transposed_copy().defined());
}

TEST(TensorTransposedCopy, CopyFromForgetsIt) {
  Tensor m = Tensor::with_room_for_transpose(2, 2, DType::float32);
  m.copy_from(Tensor::zeros({2, 2}));
  m.transpose_room().copy_from(Tensor::zeros({2, 2}));
  m.mark_transposed_copy();
  ASSERT_TRUE(m.transposed_copy().defined());
  m.copy_from(Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}));
  EXPECT_FALSE(m.transposed_copy().defined());
  m.mark_transposed_copy();
  m.clear_transposed_copy();
  EXPECT_FALSE(m.transposed_copy().defined());
}

TEST(TensorTransposedCopy, ARoomOnlyWhereOneWasMade) {
  try {
    (void)Tensor({4, 4}).transpose_room();
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("with_room_for_transpose"));
    EXPECT_THAT(e.what(), HasSubstr("float32[4, 4]"));
  }
  EXPECT_THROW(Tensor({4, 4}).mark_transposed_copy(), InvalidArgument);
  // Empty matrices have a room of no bytes and never a copy.
  Tensor empty = Tensor::with_room_for_transpose(0, 7, DType::bfloat16);
  EXPECT_EQ(empty.transpose_room().shape(), Shape({7, 0}));
  empty.mark_transposed_copy();
  EXPECT_FALSE(empty.transposed_copy().defined());
}

}  // namespace
}  // namespace lockstep
