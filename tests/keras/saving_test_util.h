#pragma once
// Shared by the .keras saving tests: a per-test temporary directory, the models saved (the CLI's
// architectures, rebuilt here as apps/models.cpp builds them, and models holding every built-in
// layer), and running Debian's python3 (h5py) as an independent reader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "lockstep/keras.h"

namespace lockstep::keras::saving_test {

namespace fs = std::filesystem;

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    clear_session();
    dir_ = fs::temp_directory_path() /
           ("lockstep_keras_saving_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// Runs `script` with Debian's python3 (which python3-h5py installs into) on `arg`; returns its
// standard output and error. A missing interpreter or module fails the test with what to install.
inline std::string run_python(const std::string& script, const std::string& arg, int* status) {
  const std::string python = LOCKSTEP_DEBIAN_PYTHON3;
  if (::access(python.c_str(), X_OK) != 0) {
    ADD_FAILURE() << python << " is missing: run scripts/setup (Debian packages python3, "
                  << "python3-h5py, python3-numpy).";
    *status = -1;
    return "";
  }
  const std::string file =
      (fs::temp_directory_path() / ("lockstep_reader_" + std::to_string(::getpid()) + ".py"))
          .string();
  std::ofstream(file) << script;
  std::string out;
  FILE* p = ::popen((python + " " + file + " '" + arg + "' 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while (p && (n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = p ? ::pclose(p) : -1;
  fs::remove(file);
  if (out.find("No module named 'h5py'") != std::string::npos ||
      out.find("No module named 'numpy'") != std::string::npos) {
    ADD_FAILURE() << "python3-h5py / python3-numpy are missing: run scripts/setup.";
  }
  return out;
}

// Random inputs of `shape` in [0, 1) from a fixed seed.
inline Tensor random_input(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(0.0f, 1.0f);
  Tensor t(shape);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

// Every element equal, bit for bit (NaN payloads included).
inline ::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) {
    return ::testing::AssertionFailure() << a.describe() << " vs " << b.describe();
  }
  if (std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) != 0) {
    return ::testing::AssertionFailure()
           << "values differ: " << a.to_string() << " vs " << b.to_string();
  }
  return ::testing::AssertionSuccess();
}

// The CLI's models (apps/models.cpp): uint8 [784] input, Rescaling(1/255), hidden layers, and a
// float32 softmax Dense(10).
inline Sequential cli_model(const std::string& name) {
  using namespace layers;
  Sequential m({Input({784}, DType::uint8), Rescaling(1.0 / 255)});
  if (name == "mlp") {
    m.add(Dense({.units = 128, .activation = "relu"}));
  } else if (name == "wide") {
    m.add(Dense({.units = 2048, .activation = "relu"}));
    m.add(Dense({.units = 2048, .activation = "relu"}));
  } else if (name == "conv") {
    m.add(Reshape({28, 28, 1}));
    m.add(Conv2D({.filters = 32, .kernel_size = {3, 3}, .activation = "relu"}));
    m.add(MaxPooling2D());
    m.add(Flatten());
  } else {  // vit: apps/models/vit.cpp's encoder as one functional layer
    const int64_t width = 64, heads = 4, tokens = 49;
    auto inputs = Input({784});
    auto x = Reshape({28, 28, 1})(inputs);
    x = Conv2D({.filters = width, .kernel_size = {4, 4}, .strides = {4, 4}})(x);
    x = Reshape({tokens, width})(x);
    x = Add()({x, PositionEmbedding({.sequence_length = tokens})(x)});
    for (int b = 0; b < 4; ++b) {
      auto h = LayerNormalization({.epsilon = 1e-6})(x);
      h = MultiHeadAttention({.num_heads = heads, .key_dim = width / heads})({h, h});
      x = Add()({x, h});
      h = LayerNormalization({.epsilon = 1e-6})(x);
      h = Dense({.units = 2 * width, .activation = "gelu"})(h);
      h = Dense({.units = width})(h);
      x = Add()({x, h});
    }
    x = LayerNormalization({.epsilon = 1e-6})(x);
    x = GlobalAveragePooling1D()(x);
    m.add(std::shared_ptr<Layer>(std::make_shared<Model>(inputs, x, "vit")));
  }
  m.add(Dense({.units = 10, .activation = "softmax", .dtype = "float32"}));
  return m;
}

inline Tensor cli_input(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensor t({n, 784}, DType::uint8);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  return t;
}

// Every built-in layer, in two functional models and a Sequential (with a nested model and a
// mixed_bfloat16 layer), each built for its input.
struct LayerZoo {
  std::shared_ptr<Model> model;
  Tensor input;
};

// Rescaling, Conv2D, BatchNormalization, MaxPooling2D, Flatten, Dropout, Dense (float32 and
// mixed_bfloat16), Activation on uint8 images.
inline LayerZoo image_zoo() {
  using namespace layers;
  auto in = Input({8, 8, 1}, DType::uint8, "image");
  auto x = Rescaling({.scale = 1.0 / 255, .offset = -0.5})(in);
  x = Conv2D({.filters = 4, .kernel_size = {3, 3}, .padding = "same", .activation = "relu"})(x);
  x = BatchNormalization({.momentum = 0.9})(x);
  x = MaxPooling2D({.pool_size = {2, 2}})(x);
  x = Flatten()(x);
  x = Dropout({.rate = 0.25, .seed = 7})(x);
  x = Dense({.units = 6, .activation = "tanh", .dtype = "mixed_bfloat16"})(x);
  x = Dense({.units = 3, .dtype = "float32"})(x);
  x = Activation("softmax")(x);
  std::mt19937_64 rng(3);
  Tensor img({5, 8, 8, 1}, DType::uint8);
  for (int64_t i = 0; i < img.num_elements(); ++i)
    img.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  return {std::make_shared<Model>(in, x, "image_zoo"), img};
}

// Embedding, PositionEmbedding, Add, LayerNormalization, MultiHeadAttention, Concatenate, Dense
// (gelu), Reshape, GlobalAveragePooling1D on int32 token ids.
inline LayerZoo sequence_zoo() {
  using namespace layers;
  auto in = Input({5}, DType::int32, "tokens");
  auto e = Embedding({.input_dim = 10, .output_dim = 8})(in);
  auto x = Add()({e, PositionEmbedding({.sequence_length = 5})(e)});
  auto h = LayerNormalization({.epsilon = 1e-5})(x);
  h = MultiHeadAttention({.num_heads = 2, .key_dim = 4})({h, h});
  auto c = Concatenate()({x, h});
  auto d = Dense({.units = 4, .activation = "gelu"})(c);
  auto r = Reshape({20})(d);
  auto g = GlobalAveragePooling1D()(d);
  auto out = Concatenate({.axis = -1})({r, g});
  Tensor ids({3, 5}, DType::int32);
  for (int64_t i = 0; i < ids.num_elements(); ++i)
    ids.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 10);
  return {std::make_shared<Model>(in, out, "sequence_zoo"), ids};
}

// A Sequential holding a functional model and a Sequential as layers.
inline LayerZoo nested_zoo() {
  using namespace layers;
  auto in = Input({6});
  std::shared_ptr<Layer> inner =
      std::make_shared<Model>(in, Dense({.units = 5, .activation = "relu"})(in), "inner");
  std::shared_ptr<Layer> inner_seq = std::make_shared<Sequential>(
      std::vector<LayerArg>{Dense({.units = 4, .activation = "sigmoid"})}, "inner_seq");
  std::shared_ptr<Model> m = std::make_shared<Sequential>(
      std::vector<LayerArg>{Input({6}), inner, inner_seq, Dense({.units = 2})}, "outer");
  return {m, random_input({4, 6}, 9)};
}

}  // namespace lockstep::keras::saving_test
