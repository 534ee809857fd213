// save_weights / load_weights at the model level.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/keras.h"

namespace lockstep::keras {
namespace {

namespace fs = std::filesystem;

class WeightsFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lockstep_weights_file_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  fs::path dir_;
};

Sequential mlp(int64_t in, int64_t hidden, int64_t out) {
  return Sequential({
      Input({in}),
      layers::Dense({.units = hidden, .activation = "relu"}),
      layers::Dense({.units = out, .activation = "softmax"}),
  });
}

std::vector<std::string> bytes_of(const Model& model) {
  std::vector<std::string> out;
  for (const Variable& v : model.weights()) {
    const Tensor& t = v.raw_value();
    out.emplace_back(static_cast<const char*>(t.raw_data()), t.nbytes());
  }
  return out;
}

// Weights that are not what a fresh model starts with (trained a step, with odd bit patterns).
void scramble(Model& model) {
  uint32_t state = 12345;
  for (const Variable& v : model.weights()) {
    Tensor t = v.raw_value().clone();
    float* d = t.data<float>();
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      state = state * 1664525u + 1013904223u;
      d[i] = static_cast<float>(static_cast<int32_t>(state)) * 1e-10f;
    }
    v.assign(t);
  }
}

TEST_F(WeightsFile, RoundTripsExactlyThroughAFreshModelWithTheSameLayerNames) {
  Sequential saved({
      Input({784}),
      layers::Dense({.units = 128, .activation = "relu", .name = "hidden"}),
      layers::Dense({.units = 10, .activation = "softmax", .name = "classifier"}),
  });
  scramble(saved);
  saved.save_weights(path("seed.safetensors"));

  Sequential fresh({
      Input({784}),
      layers::Dense({.units = 128, .activation = "relu", .name = "hidden"}),
      layers::Dense({.units = 10, .activation = "softmax", .name = "classifier"}),
  });
  ASSERT_NE(bytes_of(fresh), bytes_of(saved));
  fresh.load_weights(path("seed.safetensors"));
  EXPECT_EQ(bytes_of(fresh), bytes_of(saved));
}

// DISABLED, a known bug (reported): Model::load_weights matches tensors by weight name only, and
// automatic layer names are unique per process, so a fresh model of the same architecture built
// in the same process ("dense_2/kernel") cannot load a file saved from the first ("dense/kernel").
// Keras loads it: Keras 2's HDF5 load_weights matches layers in order, and Keras 3's weights files
// key variables by the model's structure, not by layer name. Enable when load_weights falls back
// to matching in order (or keys by structure).
TEST_F(WeightsFile, RoundTripsExactlyThroughAFreshModelWithOtherAutomaticNames) {
  Sequential saved = mlp(784, 128, 10);
  scramble(saved);
  saved.save_weights(path("seed.safetensors"));
  Sequential fresh = mlp(784, 128, 10);
  ASSERT_NE(fresh.weights()[0].name(), saved.weights()[0].name());
  fresh.load_weights(path("seed.safetensors"));
  EXPECT_EQ(bytes_of(fresh), bytes_of(saved));
}

// DISABLED for the same bug: the error names the missing "dense_N/kernel" but no shape.
TEST_F(WeightsFile, LoadingIntoADifferentArchitectureNamesTheWeightAndBothShapes) {
  Sequential saved = mlp(784, 128, 10);
  saved.save_weights(path("seed.safetensors"));
  Sequential other = mlp(784, 64, 10);
  std::vector<std::string> before = bytes_of(other);
  try {
    other.load_weights(path("seed.safetensors"));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    std::string what = e.what();
    EXPECT_THAT(what, ::testing::HasSubstr(other.weights()[0].name()));
    EXPECT_THAT(what, ::testing::HasSubstr("[784, 128]"));
    EXPECT_THAT(what, ::testing::HasSubstr("[784, 64]"));
  }
  EXPECT_EQ(bytes_of(other), before) << "a failed load must not change any weight";
}

TEST_F(WeightsFile, LoadingIntoADifferentArchitectureWithTheSameNamesNamesBothShapes) {
  Sequential saved({
      Input({784}),
      layers::Dense({.units = 128, .activation = "relu", .name = "h"}),
      layers::Dense({.units = 10, .activation = "softmax", .name = "out"}),
  });
  saved.save_weights(path("seed.safetensors"));
  Sequential other({
      Input({784}),
      layers::Dense({.units = 32, .activation = "relu", .name = "h"}),
      layers::Dense({.units = 10, .activation = "softmax", .name = "out"}),
  });
  try {
    other.load_weights(path("seed.safetensors"));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("h/kernel"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("[784, 128]"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("[784, 32]"));
  }
}

TEST_F(WeightsFile, LoadingAFileWithAnotherNumberOfWeightsIsRefused) {
  Sequential saved = mlp(8, 4, 2);
  saved.save_weights(path("small.safetensors"));
  Sequential deeper({
      Input({8}),
      layers::Dense({.units = 4, .activation = "relu"}),
      layers::Dense({.units = 4, .activation = "relu"}),
      layers::Dense({.units = 2, .activation = "softmax"}),
  });
  EXPECT_THROW(deeper.load_weights(path("small.safetensors")), InvalidArgument);
}

}  // namespace
}  // namespace lockstep::keras
