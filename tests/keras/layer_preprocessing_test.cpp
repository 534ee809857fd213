#include <gtest/gtest.h>

#include "testing/bf16_matmul_mode.h"
#include "testing/policy_guard.h"
#include "testing/transposed_input_copies.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/cpu_isa.h"
#include "lockstep/keras/mixed_precision.h"
#include "lockstep/ops/cpu_kernels.h"
#include "lockstep/ops/matmul.h"

#include "lockstep/keras.h"
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

// In training under mixed_bfloat16, told that its readers multiply its output transposed (as a
// model tells it, detail::LayerCallScope), a Rescaling of uint8 rows also writes its output's
// transpose beside it (Tensor::transposed_copy) where the AVX512_BF16 conversion runs: the
// output's bits are the scalar definition's, as outside training, and the copy holds them
// transposed. Shapes that are and are not multiples of the loop's 32 x 32 tiles.
// The policy's bfloat16 form is pinned: measured, a busy machine could pick its float32 form.
bool expect_transposed_copy() {
  return !ops::mixed_bfloat16_computes_in_f32() && effective_cpu_isa() >= CpuIsa::avx512_core_bf16;
}

TEST(Rescaling, InTrainingUnderMixedBfloat16WritesItsTransposeBesideItsOutput) {
  testing::Bf16MatmulModeGuard mode(ops::Bf16MatmulMode::bfloat16_kernels);
  testing::TransposedInputCopiesGuard copies(true);
  const bool expect_copy = expect_transposed_copy();
  std::mt19937 rng(11);
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {3, 100}, {31, 33}, {32, 32}, {33, 65}, {64, 16}, {128, 784}}) {
    for (double scale : {1.0 / 255, -0.5}) {
      Tensor x({rows, cols}, DType::uint8);
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        x.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
      }
      x.data<uint8_t>()[0] = 0;  // -0.5 · 0 = -0, which the offset of + 0 makes +0
      layers::Rescaling r({.scale = scale, .dtype = "mixed_bfloat16"});
      detail::LayerCallScope::set_next_output_read_transposed();
      Tensor y = r(x, /*training=*/true);
      detail::LayerCallScope::set_next_output_read_transposed();
      Tensor y_eval = r(x, /*training=*/false);
      ASSERT_EQ(y.dtype(), DType::bfloat16);
      EXPECT_FALSE(y_eval.transposed_copy().defined()) << "written outside training";
      const Tensor yt = y.transposed_copy();
      ASSERT_EQ(yt.defined(), expect_copy) << rows << "x" << cols;
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          const float f =
              static_cast<float>(x.data<uint8_t>()[i * cols + j]) * static_cast<float>(scale) +
              0.0f;
          const uint16_t want = bfloat16(f).bits;
          ASSERT_EQ(y.data<bfloat16>()[i * cols + j].bits, want)
              << rows << "x" << cols << " element (" << i << ", " << j << ")";
          ASSERT_EQ(y_eval.data<bfloat16>()[i * cols + j].bits, want);
          if (expect_copy) {
            ASSERT_EQ(yt.data<bfloat16>()[j * rows + i].bits, want)
                << rows << "x" << cols << " transposed element (" << j << ", " << i << ")";
          }
        }
      }
    }
  }
}

// Not where it cannot help or the switch is off: no reader that reads it transposed, an offset
// (the finite-loop path), rank 3, the float32 compute dtype,
// mixed_precision::set_transposed_input_copies(false).
TEST(Rescaling, WritesNoTransposeWhereItIsNotAsked) {
  testing::Bf16MatmulModeGuard mode(ops::Bf16MatmulMode::bfloat16_kernels);
  Tensor x2({4, 40}, DType::uint8), x3({2, 4, 40}, DType::uint8);
  std::memset(x2.raw_data(), 7, x2.nbytes());
  std::memset(x3.raw_data(), 7, x3.nbytes());
  auto told = [](layers::Rescaling& r, const Tensor& x) {
    detail::LayerCallScope::set_next_output_read_transposed();
    return r(x, /*training=*/true);
  };
  layers::Rescaling mixed({.scale = 1.0 / 255, .dtype = "mixed_bfloat16"});
  EXPECT_FALSE(mixed(x2, true).transposed_copy().defined()) << "not told";
  layers::Rescaling offset({.scale = 1.0 / 255, .offset = 0.5, .dtype = "mixed_bfloat16"});
  EXPECT_FALSE(told(offset, x2).transposed_copy().defined());
  EXPECT_FALSE(told(mixed, x3).reshape({8, 40}).transposed_copy().defined());
  layers::Rescaling f32(1.0 / 255);
  EXPECT_FALSE(told(f32, x2).transposed_copy().defined());
  {
    testing::TransposedInputCopiesGuard copies(false);
    EXPECT_FALSE(told(mixed, x2).transposed_copy().defined()) << "switched off";
  }
  testing::TransposedInputCopiesGuard copies(true);
  EXPECT_EQ(told(mixed, x2).transposed_copy().defined(), expect_transposed_copy());
}

// What a model tells a layer about its output's readers: set in a training call when every reader
// is a layer that reads its input transposed (a trainable Dense computing in bfloat16 on oneDNN's
// bfloat16 kernels), in Sequential and functional models alike; never in inference, before a
// layer that does not (Flatten), before a frozen Dense, or for the model's output.
class ReadTransposedProbe : public LayerImpl<ReadTransposedProbe> {
 public:
  explicit ReadTransposedProbe(std::shared_ptr<std::vector<bool>> seen)
      : LayerImpl("", "read_transposed_probe"), seen_(std::move(seen)) {}
  std::string class_name() const override { return "ReadTransposedProbe"; }
  Tensor call(const Tensor& x, bool) override {
    seen_->push_back(detail::LayerCallScope::current_output_read_transposed());
    return x;
  }

 private:
  std::shared_ptr<std::vector<bool>> seen_;
};

TEST(Rescaling, ModelsTellALayerWhenItsReadersReadItTransposed) {
  lockstep::testing::PolicyGuard policy("mixed_bfloat16");
  testing::Bf16MatmulModeGuard mode(ops::Bf16MatmulMode::bfloat16_kernels);
  const bool dense_reads = ops::has_native_bfloat16_math();
  auto seen = std::make_shared<std::vector<bool>>();
  const Tensor x = Tensor::ones({2, 8}, DType::bfloat16);

  Sequential to_dense({Input({8}), ReadTransposedProbe(seen), layers::Dense({.units = 3})});
  to_dense(x, /*training=*/true);
  to_dense(x, /*training=*/false);
  layers::Dense frozen({.units = 3});
  frozen.set_trainable(false);
  Sequential to_frozen({Input({8}), ReadTransposedProbe(seen), std::move(frozen)});
  to_frozen(x, true);
  Sequential to_flatten({Input({8}), ReadTransposedProbe(seen), layers::Flatten()});
  to_flatten(x, true);
  EXPECT_EQ(*seen, (std::vector<bool>{dense_reads, false, false, false}));

  seen->clear();
  KerasTensor in = Input({8});
  KerasTensor probed = ReadTransposedProbe(seen)(in);
  Model both(in, layers::Add()(
                     {layers::Dense({.units = 3})(probed), layers::Dense({.units = 3})(probed)}));
  both(x, true);
  KerasTensor in2 = Input({8});
  KerasTensor probed2 = ReadTransposedProbe(seen)(in2);
  Model mixed_readers(in2, layers::Concatenate()(
                               {layers::Dense({.units = 3})(probed2), layers::Flatten()(probed2)}));
  mixed_readers(x, true);
  EXPECT_EQ(*seen, (std::vector<bool>{dense_reads, false}));
  EXPECT_FALSE(detail::LayerCallScope::current_output_read_transposed()) << "left set";
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
