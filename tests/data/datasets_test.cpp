#include "lockstep/data/datasets.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>

#include "lockstep/data/dataset.h"
#include "lockstep/data/idx.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// A tiny MNIST-format directory: 3 training and 2 test images of 28x28 (gzip for train, raw for
// test, as both occur in the wild).
class IdxFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lockstep_datasets_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    write(dir_, 3, 2);
  }
  void TearDown() override {
    ::unsetenv("LOCKSTEP_DATA_DIR");
    fs::remove_all(dir_);
  }
  static void write(const fs::path& dir, int64_t train, int64_t test) {
    auto images = [](int64_t n, uint8_t first) {
      Tensor t({n, 28, 28}, DType::uint8);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t k = 0; k < 784; ++k) {
          t.data<uint8_t>()[i * 784 + k] = static_cast<uint8_t>(first + i);
        }
      }
      return t;
    };
    auto labels = [](int64_t n, uint8_t first) {
      Tensor t({n}, DType::uint8);
      for (int64_t i = 0; i < n; ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(first + i);
      return t;
    };
    write_idx(dir / "train-images-idx3-ubyte.gz", images(train, 10), true);
    write_idx(dir / "train-labels-idx1-ubyte.gz", labels(train, 0), true);
    write_idx(dir / "t10k-images-idx3-ubyte", images(test, 50), false);
    write_idx(dir / "t10k-labels-idx1-ubyte", labels(test, 7), false);
  }
  fs::path dir_;
};

TEST_F(IdxFixture, FashionMnistLoadsTrainAndTestFromTheGivenDirectory) {
  auto [train, test] = datasets::fashion_mnist::load_data(dir_);
  auto& [x_train, y_train] = train;
  auto& [x_test, y_test] = test;
  EXPECT_EQ(x_train.shape(), Shape({3, 28, 28}));
  EXPECT_EQ(x_train.dtype(), DType::uint8);
  EXPECT_EQ(y_train.to_vector<int>(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(x_test.shape(), Shape({2, 28, 28}));
  EXPECT_EQ(x_test.data<uint8_t>()[784], 51);
  EXPECT_EQ(y_test.to_vector<int>(), (std::vector<int>{7, 8}));
}

TEST_F(IdxFixture, DirectoryComesFromLockstepDataDirWhenNotGiven) {
  ::setenv("LOCKSTEP_DATA_DIR", dir_.c_str(), 1);
  EXPECT_EQ(datasets::fashion_mnist::resolve_dir(), dir_.string());
  auto [train, test] = datasets::mnist::load_data();
  EXPECT_EQ(train.first.dim(0), 3);
  // A sub-directory named after the dataset takes precedence.
  fs::create_directories(dir_ / "mnist");
  write(dir_ / "mnist", 4, 1);
  EXPECT_EQ(datasets::mnist::load_data().first.first.dim(0), 4);
  EXPECT_EQ(datasets::fashion_mnist::load_data().first.first.dim(0), 3);
}

TEST_F(IdxFixture, MissingFileSaysWhereItLookedAndHowToGetTheFiles) {
  fs::remove(dir_ / "t10k-labels-idx1-ubyte");
  try {
    datasets::fashion_mnist::load_data(dir_);
    FAIL();
  } catch (const NotFound& e) {
    EXPECT_THAT(e.what(), HasSubstr((dir_ / "t10k-labels-idx1-ubyte").string()));
    EXPECT_THAT(e.what(), HasSubstr("dataset-fashion-mnist"));
  }
  try {
    datasets::mnist::load_data(dir_);
    FAIL();
  } catch (const NotFound& e) {
    EXPECT_THAT(e.what(), HasSubstr("train-images-idx3-ubyte.gz"));
    EXPECT_THAT(e.what(), HasSubstr("LOCKSTEP_DATA_DIR"));
  }
}

TEST_F(IdxFixture, ImageAndLabelCountMismatchIsDataLossNamingBothFiles) {
  Tensor labels({5}, DType::uint8);
  write_idx(dir_ / "train-labels-idx1-ubyte.gz", labels, true);
  try {
    datasets::fashion_mnist::load_data(dir_);
    FAIL();
  } catch (const DataLoss& e) {
    EXPECT_THAT(e.what(), HasSubstr("train-images-idx3-ubyte.gz holds 3 images"));
    EXPECT_THAT(e.what(), HasSubstr("train-labels-idx1-ubyte.gz holds 5 labels"));
  }
}

// A label byte at or above the number of classes would one-hot encode to a row of zeros and train
// on a wrong loss without a word: the loader refuses it, naming the file, the example and the
// value. Both compressed and raw label files, train and test split.
TEST_F(IdxFixture, LabelOutOfRangeIsDataLossNamingFileExampleAndValue) {
  Tensor labels = Tensor::from_vector<uint8_t>({3, 9, 200}, {3});
  write_idx(dir_ / "train-labels-idx1-ubyte.gz", labels, true);
  try {
    datasets::fashion_mnist::load_data(dir_);
    FAIL() << "a label of 200 among 10 classes was accepted";
  } catch (const DataLoss& e) {
    EXPECT_THAT(e.what(), HasSubstr((dir_ / "train-labels-idx1-ubyte.gz").string()));
    EXPECT_THAT(e.what(), HasSubstr("example 2"));
    EXPECT_THAT(e.what(), HasSubstr("200"));
    EXPECT_THAT(e.what(), HasSubstr("[0, 10)"));
  }
  write(dir_, 3, 2);
  write_idx(dir_ / "t10k-labels-idx1-ubyte", Tensor::from_vector<uint8_t>({10, 0}, {2}));
  try {
    datasets::mnist::load_data(dir_);
    FAIL() << "a label of 10 among 10 classes was accepted";
  } catch (const DataLoss& e) {
    EXPECT_THAT(e.what(), HasSubstr((dir_ / "t10k-labels-idx1-ubyte").string()));
    EXPECT_THAT(e.what(), HasSubstr("example 0"));
    EXPECT_THAT(e.what(), HasSubstr("label 10"));
  }
}

TEST_F(IdxFixture, EveryLabelBelowTheClassCountIsAccepted) {
  write_idx(dir_ / "train-labels-idx1-ubyte.gz", Tensor::from_vector<uint8_t>({0, 9, 5}, {3}),
            true);
  auto [train, test] = datasets::fashion_mnist::load_data(dir_);
  EXPECT_EQ(train.second.to_vector<int>(), (std::vector<int>{0, 9, 5}));
}

TEST_F(IdxFixture, WrongDtypeOrRankIsDataLoss) {
  write_idx(dir_ / "t10k-images-idx3-ubyte", Tensor::zeros({2, 784}, DType::uint8));
  EXPECT_THROW(datasets::fashion_mnist::load_data(dir_), DataLoss);
}

TEST_F(IdxFixture, LoadedImagesFeedAPipeline) {
  auto [train, test] = datasets::fashion_mnist::load_data(dir_);
  Dataset ds = Dataset::from_tensor_slices({train.first, train.second}).batch(2);
  Iterator it = ds.make_iterator();
  std::optional<Element> b = it.next();
  ASSERT_TRUE(b);
  EXPECT_EQ((*b)[0].shape(), Shape({2, 28, 28}));
  EXPECT_EQ((*b)[1].to_vector<int>(), (std::vector<int>{0, 1}));
}

// The real files from the Debian package dataset-fashion-mnist, which the setup scripts install.
TEST(FashionMnistInstalled, HasSixtyThousandTrainAndTenThousandTestExamples) {
  auto [train, test] = datasets::fashion_mnist::load_data(datasets::fashion_mnist::kDefaultDir);
  EXPECT_EQ(train.first.shape(), Shape({60000, 28, 28}));
  EXPECT_EQ(train.second.shape(), Shape({60000}));
  EXPECT_EQ(test.first.shape(), Shape({10000, 28, 28}));
  EXPECT_EQ(test.second.shape(), Shape({10000}));
  int max_label = 0;
  for (uint8_t v : train.second.to_vector<uint8_t>()) max_label = std::max<int>(max_label, v);
  EXPECT_EQ(max_label, 9);
}

}  // namespace
}  // namespace lockstep
