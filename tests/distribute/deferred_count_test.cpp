// The deferred-sum count check that a step's float32 gradient all-reduce carries across workers
// (DeferredSums::count_from_sums): each worker adds its count n and n², and the
// workers agree exactly when workers · Σn² = (Σn)². The sums below are written out by hand for
// the worker counts they name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "distribute/step/deferred_sums.h"
#include "lockstep/core/error.h"

namespace lockstep::distribute {
namespace {

using ::testing::HasSubstr;

TEST(DeferredCount, EqualCountsGiveTheCommonCount) {
  // 3 workers with 2 values each: Σn = 6, Σn² = 12.
  EXPECT_EQ(DeferredSums::count_from_sums(6, 12, 3), 2);
  // No values anywhere (a model without BatchNormalization).
  EXPECT_EQ(DeferredSums::count_from_sums(0, 0, 4), 0);
  // 1000 workers with 40 values each: 40000 and 1600000, still exact in float32.
  EXPECT_EQ(DeferredSums::count_from_sums(40000, 1600000, 1000), 40);
}

TEST(DeferredCount, DifferentCountsAreAFailedPreconditionNamingTheTotal) {
  // Workers with 1 and 0 values: Σn = 1, Σn² = 1; 2 · 1 ≠ 1².
  try {
    DeferredSums::count_from_sums(1, 1, 2);
    FAIL() << "counts 1 and 0 were accepted";
  } catch (const FailedPrecondition& e) {
    EXPECT_THAT(e.what(), HasSubstr("1 in all over 2 workers, not the same on each"));
    EXPECT_THAT(e.what(), HasSubstr("at least one example per worker"));
  }
  // Counts 3, 1, 2 (Σn = 6 as for three 2s, but Σn² = 14): the squares tell them apart.
  EXPECT_THROW(DeferredSums::count_from_sums(6, 14, 3), FailedPrecondition);
  // Counts 2, 0 and counts 1, 1 have the same Σn; only 1, 1 agree.
  EXPECT_THROW(DeferredSums::count_from_sums(2, 4, 2), FailedPrecondition);
  EXPECT_EQ(DeferredSums::count_from_sums(2, 2, 2), 1);
}

TEST(DeferredCount, SumsTooLargeForFloat32AreLeftToTheIntegerCheck) {
  // 2^24 and above are no longer exact in float32: -1 asks for the all-reduce of int64 counts.
  EXPECT_EQ(DeferredSums::count_from_sums(16777216.0, 1.0, 2), -1);
  EXPECT_EQ(DeferredSums::count_from_sums(4096, 16777216.0, 1), -1);
  // Values the all-reduce cannot have produced (a corrupt sum) take the integer check too.
  EXPECT_EQ(DeferredSums::count_from_sums(-1, 1, 2), -1);
}

}  // namespace
}  // namespace lockstep::distribute
