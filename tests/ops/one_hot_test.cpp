// one_hot: rows with a single 1 at the index, and indices outside [0, depth) refused (a row of
// zeros would silently give that example a wrong loss).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/ops.h"

namespace lockstep {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

template <typename F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "<no InvalidArgument thrown>";
}

TEST(OneHot, PutsOneAtEachIndexForEveryIntegerDtype) {
  // Expected rows written out by hand: index k of depth 4 -> 1 at column k.
  const std::vector<float> expected = {0, 0, 1, 0,  //
                                       1, 0, 0, 0,  //
                                       0, 0, 0, 1};
  EXPECT_EQ(ops::one_hot(Tensor::from_vector<int32_t>({2, 0, 3}, {3}), 4).to_vector<float>(),
            expected);
  EXPECT_EQ(ops::one_hot(Tensor::from_vector<int64_t>({2, 0, 3}, {3}), 4).to_vector<float>(),
            expected);
  EXPECT_EQ(ops::one_hot(Tensor::from_vector<uint8_t>({2, 0, 3}, {3}), 4).to_vector<float>(),
            expected);
  Tensor grid = ops::one_hot(Tensor::from_vector<int64_t>({1, 0}, {2, 1}), 2, DType::float64);
  EXPECT_EQ(grid.shape(), Shape({2, 1, 2}));
  EXPECT_EQ(grid.to_vector<double>(), (std::vector<double>{0, 1, 1, 0}));
}

TEST(OneHot, IndexAtOrAboveDepthIsRefusedNamingValueAndDepth) {
  Tensor labels = Tensor::from_vector<uint8_t>({3, 9, 200, 1}, {4});
  EXPECT_THAT(
      invalid_argument_message([&] { ops::one_hot(labels, 10); }),
      AllOf(HasSubstr("one_hot"), HasSubstr("200"), HasSubstr("depth 10"), HasSubstr("element 2")));
  EXPECT_THAT(invalid_argument_message([&] {
                ops::one_hot(Tensor::from_vector<int64_t>({0, 10}, {2}), 10);
              }),
              AllOf(HasSubstr("10"), HasSubstr("depth 10"), HasSubstr("element 1")));
}

TEST(OneHot, NegativeIndexIsRefused) {
  EXPECT_THAT(invalid_argument_message([&] {
                ops::one_hot(Tensor::from_vector<int32_t>({2, -1}, {2}), 3);
              }),
              AllOf(HasSubstr("-1"), HasSubstr("depth 3")));
}

TEST(OneHot, NonIntegerIndicesAreRefusedEvenWhenEmpty) {
  EXPECT_THAT(invalid_argument_message([&] { ops::one_hot(Tensor::zeros({2}), 3); }),
              HasSubstr("integer indices"));
  EXPECT_THAT(invalid_argument_message([&] { ops::one_hot(Tensor::zeros({0}), 3); }),
              HasSubstr("integer indices"));
}

}  // namespace
}  // namespace lockstep
