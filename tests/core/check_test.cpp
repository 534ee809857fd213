// LOCKSTEP_CHECK: throws the named error with the parts joined only when the condition is false.
#include "lockstep/core/check.h"

#include <gtest/gtest.h>

#include <string>

namespace lockstep {
namespace {

template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "<no exception>";
}

TEST(Check, PassingChecksThrowNothingAndBuildNoMessage) {
  int built = 0;
  auto part = [&] {
    ++built;
    return "part";
  };
  EXPECT_NO_THROW(LOCKSTEP_CHECK(1 + 1 == 2, part()));
  // The parts are arguments of the throwing call only: not evaluated when the check passes.
  EXPECT_EQ(built, 0);
}

TEST(Check, JoinsStringsNumbersShapesAndDtypes) {
  const int units = -3;
  const std::string msg = message_of<InvalidArgument>([&] {
    LOCKSTEP_CHECK(units > 0, "Dense: expected units > 0. Received: units=", units, ", shape ",
                   Shape{2, 3}, ", dtype ", DType::bfloat16, ", rate ", 0.5, ", ok ", false, '.');
  });
  EXPECT_EQ(msg,
            "InvalidArgument: Dense: expected units > 0. Received: units=-3, shape [2, 3], dtype "
            "bfloat16, rate "
            "0.500000, ok false.");
}

TEST(Check, WithoutPartsTheMessageNamesTheCondition) {
  const int rank = 1;
  EXPECT_EQ(message_of<InvalidArgument>([&] { LOCKSTEP_CHECK(rank == 2); }),
            "InvalidArgument: Expected rank == 2 to hold.");
}

TEST(Check, ThrowsTheRequestedErrorClass) {
  EXPECT_EQ(message_of<FailedPrecondition>(
                [] { LOCKSTEP_CHECK_AS(FailedPrecondition, false, "not built yet"); }),
            "FailedPrecondition: not built yet");
  EXPECT_THROW(LOCKSTEP_CHECK_AS(OutOfRange, 2 < 1), OutOfRange);
}

TEST(Check, EvaluatesTheConditionOnce) {
  int calls = 0;
  auto positive = [&] {
    ++calls;
    return true;
  };
  LOCKSTEP_CHECK(positive(), "never");
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace lockstep
