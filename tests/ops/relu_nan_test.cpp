// relu must keep NaN (as TensorFlow, PyTorch and JAX do): oneDNN's max(x, 0) would turn it into 0
// and hide a diverged model from TerminateOnNaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "lockstep/ops/activations.h"
#include "lockstep/ops/linear.h"

namespace lockstep {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(Relu, KeepsNaNAndZeroesNegatives) {
  for (DType d : {DType::float32, DType::bfloat16}) {
    Tensor x = Tensor::from_vector<float>({-1.0f, kNaN, 2.0f}, {3}).to(d);
    std::vector<float> y = ops::relu_forward(x).to_vector<float>();
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_TRUE(std::isnan(y[1])) << dtype_name(d);
    EXPECT_EQ(y[2], 2.0f);
  }
}

TEST(Linear, FusedReluKeepsNaNFromTheInput) {
  // x row 0 is finite and gives a negative pre-activation (zeroed); row 1 holds a NaN.
  Tensor x = Tensor::from_vector<float>({1.0f, 1.0f, kNaN, 1.0f}, {2, 2});
  Tensor kernel = Tensor::from_vector<float>({-1.0f, -2.0f}, {2, 1});
  Tensor bias = Tensor::from_vector<float>({0.5f}, {1});
  std::vector<float> y =
      ops::linear_forward(x, kernel, bias, ops::FusedActivation::relu).to_vector<float>();
  EXPECT_EQ(y[0], 0.0f);  // relu(-1 - 2 + 0.5)
  EXPECT_TRUE(std::isnan(y[1]));
}

}  // namespace
}  // namespace lockstep
