#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lockstep/core/error.h"
#include "lockstep/keras/saving/safetensors.h"

namespace lockstep::keras::saving {
namespace {

namespace fs = std::filesystem;

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lockstep_safetensors_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

std::vector<std::pair<std::string, Tensor>> sample_tensors() {
  Tensor kernel({3, 5});
  for (int i = 0; i < 15; ++i) kernel.data<float>()[i] = 0.25f * static_cast<float>(i) - 1.0f;
  return {{"dense/kernel", kernel},
          {"dense/bias", Tensor::from_vector<float>({1.5f, -2.0f, 0.0f}, {3})},
          {"embedding/table", Tensor::full({2, 2}, 0.75, DType::bfloat16)},
          {"stats/mean", Tensor::from_vector<double>({3.141592653589793}, {1})},
          {"counts", Tensor::from_vector<int64_t>({1, -2, 1LL << 40}, {3})},
          {"ids", Tensor::from_vector<int32_t>({7, 8}, {2})},
          {"mask", Tensor::from_vector<uint8_t>({1, 0, 255}, {3})},
          {"scalar", Tensor::scalar(2.0)},
          {"empty", Tensor::zeros({0, 4})}};
}

std::string read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void write_bytes(const std::string& p, const std::string& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

std::string bytes_of(const Tensor& t) {
  return {static_cast<const char*>(t.raw_data()), t.nbytes()};
}

TEST_F(Safetensors, RoundTripIsExactForEveryDtype) {
  auto tensors = sample_tensors();
  save_safetensors(path("w.safetensors"), tensors, {{"model", "mlp"}});
  SafetensorsFile f = load_safetensors(path("w.safetensors"));
  ASSERT_EQ(f.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(f.tensors[i].first, tensors[i].first);
    EXPECT_EQ(f.tensors[i].second.shape(), tensors[i].second.shape()) << tensors[i].first;
    EXPECT_EQ(f.tensors[i].second.dtype(), tensors[i].second.dtype()) << tensors[i].first;
    EXPECT_EQ(bytes_of(f.tensors[i].second), bytes_of(tensors[i].second)) << tensors[i].first;
  }
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"model", "mlp"}}));
}

// Parses the file independently of the loader, following the format specification.
TEST_F(Safetensors, FileFollowsTheSafetensorsSpecification) {
  auto tensors = sample_tensors();
  save_safetensors(path("w.safetensors"), tensors);
  const std::string b = read_bytes(path("w.safetensors"));
  ASSERT_GE(b.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(b[static_cast<size_t>(i)]);
  ASSERT_LE(8 + n, b.size());
  EXPECT_EQ((8 + n) % 8, 0u) << "the header is padded so the data starts 8-byte aligned";
  const std::string header = b.substr(8, n);
  EXPECT_EQ(header[0], '{');
  const size_t last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}') << "only spaces may follow the JSON object";
  auto j = nlohmann::json::parse(header);
  ASSERT_TRUE(j.contains("__metadata__"));
  for (const auto& [k, v] : j["__metadata__"].items()) EXPECT_TRUE(v.is_string()) << k;
  const std::map<std::string, std::string> codes = {
      {"dense/kernel", "F32"}, {"dense/bias", "F32"}, {"embedding/table", "BF16"},
      {"stats/mean", "F64"},   {"counts", "I64"},     {"ids", "I32"},
      {"mask", "U8"},          {"scalar", "F32"},     {"empty", "F32"}};
  uint64_t expected_begin = 0;
  for (const auto& [name, t] : tensors) {
    const auto& e = j.at(name);
    EXPECT_EQ(e.at("dtype"), codes.at(name));
    EXPECT_EQ(e.at("shape").get<std::vector<int64_t>>(), t.shape().to_vector());
    auto off = e.at("data_offsets").get<std::vector<uint64_t>>();
    EXPECT_EQ(off[0], expected_begin) << name << ": tensors tile the data buffer in order";
    EXPECT_EQ(off[1] - off[0], t.nbytes());
    EXPECT_EQ(b.substr(8 + n + off[0], off[1] - off[0]), bytes_of(t)) << name;
    expected_begin = off[1];
  }
  EXPECT_EQ(8 + n + expected_begin, b.size());
}

TEST_F(Safetensors, MissingFileIsNotFound) {
  EXPECT_THROW(load_safetensors(path("nope.safetensors")), NotFound);
}

TEST_F(Safetensors, TruncationAnywhereIsDataLossNamingTheFile) {
  save_safetensors(path("w.safetensors"), sample_tensors());
  const std::string good = read_bytes(path("w.safetensors"));
  for (size_t cut : {size_t{0}, size_t{4}, size_t{8}, size_t{9}, size_t{100}, good.size() / 2,
                     good.size() - 1}) {
    write_bytes(path("cut.safetensors"), good.substr(0, cut));
    try {
      load_safetensors(path("cut.safetensors"));
      ADD_FAILURE() << "truncated at " << cut << " loaded";
    } catch (const DataLoss& e) {
      EXPECT_NE(std::string(e.what()).find("cut.safetensors"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("byte offset"), std::string::npos) << e.what();
    }
  }
}

TEST_F(Safetensors, EverySingleBitFlipIsDataLoss) {
  save_safetensors(path("w.safetensors"), {{"a", Tensor::from_vector<float>({1, 2, 3}, {3})},
                                           {"b", Tensor::from_vector<int32_t>({4, 5}, {2})}});
  const std::string good = read_bytes(path("w.safetensors"));
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      write_bytes(path("bad.safetensors"), bad);
      try {
        load_safetensors(path("bad.safetensors"));
        ADD_FAILURE() << "flip of bit " << bit << " at byte " << i << " went unnoticed";
      } catch (const DataLoss&) {
      } catch (const std::exception& e) {
        ADD_FAILURE() << "flip at byte " << i << ": not DataLoss: " << e.what();
      }
    }
  }
}

TEST_F(Safetensors, DataCorruptionNamesTheTensorAndItsOffset) {
  save_safetensors(path("w.safetensors"), sample_tensors());
  std::string b = read_bytes(path("w.safetensors"));
  b[b.size() - 20] ^= 0x10;  // inside the data of a late tensor
  write_bytes(path("w.safetensors"), b);
  try {
    load_safetensors(path("w.safetensors"));
    FAIL();
  } catch (const DataLoss& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("checksum mismatch in the data of tensor"), std::string::npos) << msg;
  }
}

TEST_F(Safetensors, AbsurdHeaderLengthIsDataLossNotAnAllocation) {
  for (uint64_t n : {uint64_t{1} << 62, ~uint64_t{0}, uint64_t{200'000'000}, uint64_t{1}}) {
    std::string b(8, '\0');
    std::memcpy(b.data(), &n, 8);
    b += "{}";
    write_bytes(path("h.safetensors"), b);
    EXPECT_THROW(load_safetensors(path("h.safetensors")), DataLoss) << n;
  }
}

// Found by fuzz/safetensors_fuzz: nlohmann reports a number out of double's range as
// out_of_range, not parse_error; it must still be DataLoss, not an escaping json exception.
TEST_F(Safetensors, NumberOutOfRangeInTheHeaderIsDataLoss) {
  const std::string header = R"({"x":{"dtype":9e99999999999,"shape":[2],"data_offsets":[0,8]}})";
  std::string b(8, '\0');
  uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  b += header + std::string(8, '\0');
  write_bytes(path("big.safetensors"), b);
  EXPECT_THROW(load_safetensors(path("big.safetensors")), DataLoss);
}

TEST_F(Safetensors, ReadsFilesFromOtherWritersWithoutChecksums) {
  // A minimal file as the reference implementation writes it (no __metadata__).
  std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  header.append((8 - (8 + header.size()) % 8) % 8, ' ');
  std::string b(8, '\0');
  uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  float v[2] = {1.5f, -3.0f};
  b += header + std::string(reinterpret_cast<const char*>(v), 8);
  write_bytes(path("other.safetensors"), b);
  SafetensorsFile f = load_safetensors(path("other.safetensors"));
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].second.to_vector<float>(), (std::vector<float>{1.5f, -3.0f}));
}

TEST_F(Safetensors, OffsetsOutsideTheFileOrOverlappingAreDataLoss) {
  for (const char* h :
       {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,800]}})",
        R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
        R"("y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
        R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
        R"({"x":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})",
        R"({"x":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}})"}) {
    std::string header = h;
    std::string b(8, '\0');
    uint64_t n = header.size();
    std::memcpy(b.data(), &n, 8);
    b += header + std::string(8, '\0');
    write_bytes(path("o.safetensors"), b);
    EXPECT_THROW(load_safetensors(path("o.safetensors")), DataLoss) << h;
  }
}

TEST_F(Safetensors, UnsupportedButValidDtypeIsInvalidArgument) {
  std::string header = R"({"x":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})";
  std::string b(8, '\0');
  uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  b += header + std::string(4, '\0');
  write_bytes(path("f16.safetensors"), b);
  EXPECT_THROW(load_safetensors(path("f16.safetensors")), InvalidArgument);
}

TEST_F(Safetensors, BadNamesAreInvalidArgument) {
  Tensor t = Tensor::zeros({1});
  EXPECT_THROW(save_safetensors(path("n"), {{"", t}}), InvalidArgument);
  EXPECT_THROW(save_safetensors(path("n"), {{"a", t}, {"a", t}}), InvalidArgument);
  EXPECT_THROW(save_safetensors(path("n"), {{"__metadata__", t}}), InvalidArgument);
  EXPECT_THROW(save_safetensors(path("n"), {{"a", t}}, {{"lockstep.crc32", "0"}}), InvalidArgument);
  EXPECT_FALSE(fs::exists(path("n")));
}

// A writer killed mid-write (SIGKILL: no cleanup runs) never leaves a corrupt file at the path.
TEST_F(Safetensors, InterruptedWriteLeavesThePreviousFileIntact) {
  const std::string p = path("ckpt.safetensors");
  Tensor old_value = Tensor::full({1000}, 1.0);
  save_safetensors(p, {{"w", old_value}});
  Tensor big = Tensor::full({16 << 20}, 2.0);  // 64 MB: a write takes long enough to interrupt
  for (int round = 0; round < 3; ++round) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(fds[0]);
      // Announces each finished write; the parent kills it after the first, i.e. during the next.
      for (;;) {
        save_safetensors(p, {{"w", big}});
        char c = 'x';
        if (::write(fds[1], &c, 1) != 1) ::_exit(1);
      }
    }
    ::close(fds[1]);
    if (round == 0) {
      // Kill before the first write can finish: only the old file may be there.
      ::kill(child, SIGKILL);
    } else {
      char c;
      ASSERT_EQ(::read(fds[0], &c, 1), 1);
      ::kill(child, SIGKILL);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    ::close(fds[0]);
    ASSERT_TRUE(WIFSIGNALED(status));
    SafetensorsFile f = load_safetensors(p);
    ASSERT_EQ(f.tensors.size(), 1u);
    const Tensor& w = f.tensors[0].second;
    const bool is_old = w.num_elements() == 1000 && bytes_of(w) == bytes_of(old_value);
    const bool is_new = w.num_elements() == big.num_elements() && bytes_of(w) == bytes_of(big);
    EXPECT_TRUE(is_old || is_new) << "round " << round;
    if (round > 0) {
      EXPECT_TRUE(is_new) << "a completed write is visible";
    }
  }
  // Leftover temporaries have their own names and are never the checkpoint.
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string name = e.path().filename().string();
    if (name != "ckpt.safetensors") {
      EXPECT_EQ(name.rfind("ckpt.safetensors.tmp.", 0), 0u) << name;
    }
  }
}

}  // namespace
}  // namespace lockstep::keras::saving
