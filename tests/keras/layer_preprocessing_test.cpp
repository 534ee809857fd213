#include <gtest/gtest.h>

#include "lockstep/keras/layers/core.h"
#include "lockstep/keras/layers/preprocessing.h"
#include "lockstep/keras/sequential.h"

namespace lockstep::keras {
namespace {

TEST(Rescaling, ConvertsUint8ImagesToScaledFloat32InOnePass) {
  layers::Rescaling rescale(1.0 / 255, 0.0);
  Tensor x = Tensor::from_vector<uint8_t>({0, 51, 255, 102}, {2, 2});
  Tensor y = rescale(x);
  EXPECT_EQ(y.dtype(), DType::float32);
  std::vector<float> v = y.to_vector<float>();
  EXPECT_FLOAT_EQ(v[0], 0.0f);
  EXPECT_FLOAT_EQ(v[1], 0.2f);
  EXPECT_FLOAT_EQ(v[2], 1.0f);
  EXPECT_FLOAT_EQ(v[3], 0.4f);
}

TEST(Rescaling, AModelWithAUint8InputTakesUint8Batches) {
  Sequential model({Input({4}, DType::uint8), layers::Rescaling(0.5, 1.0),
                    layers::Dense({.units = 1, .use_bias = false, .kernel_initializer = "ones"})});
  EXPECT_EQ(model.input_dtype(), DType::uint8);
  Tensor x = Tensor::from_vector<uint8_t>({2, 4, 6, 8}, {1, 4});
  // sum(x * 0.5 + 1) = 10 + 4
  EXPECT_DOUBLE_EQ(model.predict(x).item(), 14.0);
}

}  // namespace
}  // namespace lockstep::keras
