#pragma once
// Helpers for the file-source tests: a scratch directory per test, files written byte for byte,
// and the path of the committed fixtures (tests/data/fixtures, written by other programs).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/core/error.h"

namespace lockstep::testing_data {

class ScratchDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("lockstep_files_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, std::string_view bytes) const {
    std::string p = path(name);
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream(p, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) const {
    return write(name, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }
  std::filesystem::path dir_;
};

inline std::string fixture(const std::string& name) {
  return std::string(LOCKSTEP_TEST_FIXTURES) + "/" + name;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The message of the DataLoss that fn() throws (a test failure, and "", when it throws none).
template <typename Fn>
std::string data_loss_message(Fn fn) {
  try {
    fn();
  } catch (const DataLoss& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected DataLoss";
  return "";
}

}  // namespace lockstep::testing_data
