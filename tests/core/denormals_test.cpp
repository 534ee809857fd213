// Flushing subnormal floats in the step's threads: the mode set for a scope and restored after,
// and what it does to arithmetic, checked on values whose exact results are known.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "lockstep/core/denormals.h"

namespace lockstep {
namespace {

// Through volatile operands so that the compiler cannot fold the product at build time.
float product(float a, float b) {
  volatile float x = a, y = b;
  return x * y;
}

class FlushDenormal : public ::testing::Test {
 protected:
  void SetUp() override {
    // x86-64's and aarch64's modes are handled; elsewhere set_flush_denormal says so (and these
    // tests then check that it did).
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
    ASSERT_TRUE(set_flush_denormal(true));
#else
    ASSERT_FALSE(set_flush_denormal(true));
    GTEST_SKIP() << "no flush-to-zero mode handled on this CPU";
#endif
  }
  void TearDown() override {
    set_flush_denormal(true);
  }
};

TEST_F(FlushDenormal, SubnormalResultsAndInputsAreZeroInsideTheScope) {
  // 2^-100 * 2^-30 = 2^-130: below FLT_MIN (2^-126), a subnormal when not flushed.
  const float a = std::ldexp(1.0f, -100), b = std::ldexp(1.0f, -30);
  const float subnormal = std::ldexp(1.0f, -130);
  EXPECT_EQ(product(a, b), subnormal);  // this thread's default mode keeps subnormals
  {
    ScopedFlushDenormal flush;
    EXPECT_EQ(product(a, b), 0.0f);                     // flushed result
    EXPECT_EQ(product(subnormal, 0x1p20f), 0.0f);       // a subnormal input reads as zero
    EXPECT_EQ(product(FLT_MIN, 2.0f), 2.0f * FLT_MIN);  // normal values are untouched
  }
  EXPECT_EQ(product(a, b), subnormal);  // restored
  EXPECT_EQ(product(subnormal, 0x1p20f), std::ldexp(1.0f, -110));
}

TEST_F(FlushDenormal, TurnedOffTheScopeKeepsSubnormals) {
  ASSERT_TRUE(set_flush_denormal(false));
  EXPECT_FALSE(flush_denormal());
  ScopedFlushDenormal flush;
  EXPECT_EQ(product(std::ldexp(1.0f, -100), std::ldexp(1.0f, -30)), std::ldexp(1.0f, -130));
}

}  // namespace
}  // namespace lockstep
