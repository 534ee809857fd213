#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "lockstep/data/dataset.h"
#include "test_util.h"

namespace lockstep {
namespace {

using testing_data::scalar_element;
using testing_data::scalars;
using V = std::vector<int64_t>;
namespace fs = std::filesystem;

class FileCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lockstep_cache_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    path_ = (dir_ / "cache.bin").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  static Dataset times(int64_t factor) {
    return Dataset::range(5).map([factor](const Element& e) {
      return scalar_element(static_cast<int64_t>(e[0].item()) * factor);
    });
  }
  fs::path dir_;
  std::string path_;
};

TEST_F(FileCache, FirstPassWritesTheFileAndTheNextRunReadsIt) {
  EXPECT_EQ(scalars(times(10).cache(path_)), (V{0, 10, 20, 30, 40}));
  ASSERT_TRUE(fs::exists(path_));
  // A "next run": a new pipeline whose upstream would give other values reads the file instead.
  EXPECT_EQ(scalars(times(7).cache(path_)), (V{0, 10, 20, 30, 40}));
  EXPECT_EQ(scalars(times(7).cache(path_).repeat(2)), (V{0, 10, 20, 30, 40, 0, 10, 20, 30, 40}));
}

TEST_F(FileCache, AnIncompletePassLeavesNoFile) {
  {
    Iterator it = times(10).cache(path_).make_iterator();
    it.next();
    it.next();
  }
  EXPECT_FALSE(fs::exists(path_));
  EXPECT_EQ(fs::directory_iterator(dir_) == fs::directory_iterator(), true);
  EXPECT_EQ(scalars(times(3).cache(path_)), (V{0, 3, 6, 9, 12}));
}

TEST_F(FileCache, KeepsShapesAndDtypesOfEveryComponent) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor y = Tensor::from_vector<uint8_t>({7, 8, 9}, {3});
  Dataset ds = Dataset::from_tensor_slices({x, y}).cache(path_);
  scalars(ds.map([](const Element& e) { return Element{e[1]}; }));  // writes the file
  Iterator it = ds.make_iterator();
  Element e;
  ASSERT_TRUE(it.next(e));
  ASSERT_TRUE(it.next(e));
  EXPECT_EQ(e[0].shape(), Shape({2}));
  EXPECT_EQ(e[0].to_vector<float>(), (std::vector<float>{3, 4}));
  EXPECT_EQ(e[1].dtype(), DType::uint8);
  EXPECT_EQ(e[1].item(), 8);
}

TEST_F(FileCache, ACorruptFileIsDataLossNamingItAndTheOffset) {
  scalars(times(10).cache(path_));
  fs::resize_file(path_, fs::file_size(path_) - 5);
  Iterator it = times(10).cache(path_).make_iterator();
  try {
    while (it.next()) {
    }
    FAIL();
  } catch (const DataLoss& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(path_));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("offset"));
  }
}

}  // namespace
}  // namespace lockstep
