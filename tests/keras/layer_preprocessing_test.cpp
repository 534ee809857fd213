#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

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

TEST(Rescaling, UnderMixedBfloat16WritesTheRoundedBfloat16OfTheFloat32Result) {
  Tensor x({3, 100}, DType::uint8);
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(i * 7);
  layers::Rescaling mixed({.scale = 1.0 / 255, .offset = 0.25, .dtype = "mixed_bfloat16"});
  Tensor y = mixed(x);
  ASSERT_EQ(y.dtype(), DType::bfloat16);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    float expected =
        static_cast<float>(x.data<uint8_t>()[i]) * static_cast<float>(1.0 / 255) + 0.25f;
    ASSERT_EQ(y.data<bfloat16>()[i].bits, bfloat16(expected).bits) << "element " << i;
  }
}

// Scales that overflow float32 take the loop that keeps NaN (inf + -inf) a quiet NaN, like the
// scalar conversion; finite ones the faster loop without that check. Both against bfloat16(float).
TEST(Rescaling, UnderMixedBfloat16OverflowAndNanRoundLikeTheScalarConversion) {
  Tensor x({1, 256}, DType::uint8);
  for (int64_t i = 0; i < 256; ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(i);
  const double cases[][2] = {{3e37, 0.0}, {3e37, -INFINITY}, {-1.0 / 255, 0.5}, {7.0, -3.0}};
  for (const auto& c : cases) {
    layers::Rescaling r({.scale = c[0], .offset = c[1], .dtype = "mixed_bfloat16"});
    Tensor y = r(x);
    ASSERT_EQ(y.dtype(), DType::bfloat16);
    for (int64_t i = 0; i < 256; ++i) {
      const float f = static_cast<float>(i) * static_cast<float>(c[0]) + static_cast<float>(c[1]);
      ASSERT_EQ(y.data<bfloat16>()[i].bits, bfloat16(f).bits)
          << "scale " << c[0] << " offset " << c[1] << " element " << i;
    }
  }
}

// Without an offset the conversion may run as AVX512_BF16's vcvtneps2bf16 (which reads subnormal
// inputs as zero): every uint8 value, lengths with a tail, scales of both signs, zero, the
// smallest normal and a subnormal one (whose products can be subnormal: the loop without the
// instruction), each against bfloat16(float) of the scalar definition, + 0 included (-0 → +0).
TEST(Rescaling, UnderMixedBfloat16WithoutOffsetEveryByteRoundsLikeTheScalarConversion) {
  Tensor x({3, 261}, DType::uint8);
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(i);
  const double scales[] = {1.0 / 255, -1.0 / 255, 1.0, 0.0, -0.0, FLT_MIN, -3e-39, 1e-38, 1e35};
  for (double scale : scales) {
    layers::Rescaling r({.scale = scale, .dtype = "mixed_bfloat16"});
    Tensor y = r(x);
    ASSERT_EQ(y.dtype(), DType::bfloat16);
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      const float f = static_cast<float>(x.data<uint8_t>()[i]) * static_cast<float>(scale) + 0.0f;
      ASSERT_EQ(y.data<bfloat16>()[i].bits, bfloat16(f).bits)
          << "scale " << scale << " element " << i;
    }
  }
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
