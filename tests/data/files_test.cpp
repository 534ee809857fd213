// Dataset::list_files, Dataset::from_strings and Dataset::interleave.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "file_test_util.h"
#include "lockstep/data/bytes.h"
#include "lockstep/data/cardinality.h"
#include "lockstep/data/dataset.h"
#include "lockstep/data/text.h"
#include "test_util.h"

namespace lockstep {
namespace {

using testing_data::ScratchDir;
using V = std::vector<int64_t>;
using S = std::vector<std::string>;

S strings_of(const Dataset& ds) {
  S out;
  for (Element& e : ds) out.push_back(bytes_string(e.at(0)));
  return out;
}

class ListFiles : public ScratchDir {};

TEST_F(ListFiles, GlobsSortedWithoutShuffle) {
  for (auto n : {"b.rec", "a.rec", "c.txt", "sub/d.rec"}) write(n, "x");
  Dataset ds = Dataset::list_files(path("*.rec"), /*shuffle=*/false);
  EXPECT_EQ(strings_of(ds), (S{path("a.rec"), path("b.rec")}));
  EXPECT_EQ(ds.cardinality(), 2);
  EXPECT_EQ(strings_of(Dataset::list_files(path("*/*.rec"), false)), S{path("sub/d.rec")});
  EXPECT_EQ(strings_of(Dataset::list_files({path("*.txt"), path("a.*")}, false)),
            (S{path("a.rec"), path("c.txt")}));
}

TEST_F(ListFiles, SeededShuffleIsAPermutationAndRepeatable) {
  S all;
  for (int i = 0; i < 20; ++i) all.push_back(write("f" + std::to_string(100 + i), "x"));
  S first = strings_of(Dataset::list_files(path("f*"), true, 7));
  S again = strings_of(Dataset::list_files(path("f*"), true, 7));
  EXPECT_EQ(first, again);
  EXPECT_NE(first, all);
  std::sort(first.begin(), first.end());
  EXPECT_EQ(first, all);
}

TEST_F(ListFiles, NoMatchIsNotFoundNamingThePattern) {
  try {
    Dataset::list_files(path("*.none"));
    FAIL() << "expected NotFound";
  } catch (const NotFound& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("*.none"));
  }
}

// Input x gives the dataset x*10, x*10+1, ..., x*10 + x - 1 (x elements).
Dataset counted(const Element& e) {
  int64_t x = static_cast<int64_t>(e[0].item());
  return Dataset::range(x * 10, x * 10 + x);
}

// The example of tf.data.Dataset.interleave's documentation, with its documented output.
TEST(Interleave, GivesTheOutputOfTfDatasDocumentedExample) {
  Dataset ds = Dataset::range(1, 6).interleave(
      [](const Element& e) {
        return Dataset::from_tensor_slices(Tensor::full({6}, e[0].item(), DType::int64));
      },
      /*cycle_length=*/2, /*block_length=*/4);
  EXPECT_EQ(testing_data::scalars(ds), (V{1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3,
                                          3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5}));
}

// Orders worked out by hand (and by a Python transcription of tf.data's InterleaveDatasetOp loop)
// for inner datasets of different lengths.
TEST(Interleave, CyclesBlocksAndRefillsLikeTfData) {
  Dataset in = Dataset::range(1, 5);  // datasets of 1, 2, 3, 4 elements
  EXPECT_EQ(testing_data::scalars(in.interleave(counted, 2, 1)),
            (V{10, 20, 21, 30, 31, 40, 32, 41, 42, 43}));
  EXPECT_EQ(testing_data::scalars(in.interleave(counted, 2, 2)),
            (V{10, 20, 21, 30, 31, 32, 40, 41, 42, 43}));
  EXPECT_EQ(testing_data::scalars(in.interleave(counted, 1, 3)),
            (V{10, 20, 21, 30, 31, 32, 40, 41, 42, 43}));
}

TEST(Interleave, ParallelGivesTheSameOrder) {
  Dataset in = Dataset::range(1, 9);
  V serial = testing_data::scalars(in.interleave(counted, 3, 2));
  EXPECT_EQ(testing_data::scalars(in.interleave(counted, 3, 2, Dataset::AUTOTUNE)), serial);
  EXPECT_EQ(testing_data::scalars(in.interleave(counted, 3, 2, 2, false)), serial);
  EXPECT_EQ(serial.size(), 36u);
}

TEST(Interleave, SpecComesFromTheFunctionAndEmptyInputEnds) {
  Dataset in = Dataset::range(1, 3);
  EXPECT_EQ(in.interleave(counted, 2).element_spec(), (ElementSpec{TensorSpec{{}, DType::int64}}));
  EXPECT_TRUE(testing_data::scalars(Dataset::range(0).interleave(counted, 2)).empty());
}

TEST(Interleave, ErrorsFromAnInnerDatasetPropagate) {
  Dataset in = Dataset::range(1, 3).interleave(
      [](const Element& e) -> Dataset {
        if (e[0].item() == 2) throw DataLoss("bad file 2");
        return counted(e);
      },
      2, 1, 2);
  EXPECT_THROW(testing_data::scalars(in), DataLoss);
  EXPECT_THROW(Dataset::range(3).interleave(counted, 0), InvalidArgument);
}

TEST(Interleave, RestoresMidCycle) {
  Dataset ds = Dataset::range(1, 5).interleave(counted, 2, 1);
  Iterator it = ds.make_iterator();
  auto head = testing_data::scalars_from(it, 3);
  Iterator resumed = ds.make_iterator(it.state());
  EXPECT_EQ(testing_data::scalars_from(resumed, 100), (V{30, 31, 40, 32, 41, 42, 43}));
  EXPECT_EQ(head, (V{10, 20, 21}));
}

TEST(FromStrings, YieldsByteStrings) {
  EXPECT_EQ(strings_of(Dataset::from_strings({"a", "", "ccc"})), (S{"a", "", "ccc"}));
  EXPECT_EQ(bytes_view(bytes_tensor("hey")), "hey");
  EXPECT_THROW(bytes_view(Tensor({2, 2}, DType::uint8)), InvalidArgument);
  RaggedBytes r = RaggedBytes::from_strings({"ab", "", "c"});
  EXPECT_EQ(r.values.dim(0), 3);
  EXPECT_EQ(r.row_splits.to_vector<int64_t>(), (V{0, 2, 2, 3}));
  EXPECT_EQ(r.to_strings(), (S{"ab", "", "c"}));
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

class ShardFiles : public testing_data::ScratchDir {
 protected:
  // Four files of 1, 2, 3 and 4 records ("f<i>-<k>").
  void SetUp() override {
    ScratchDir::SetUp();
    for (int i = 0; i < 4; ++i) {
      std::string text;
      for (int k = 0; k <= i; ++k) text += "f" + std::to_string(i) + "-" + std::to_string(k) + "\n";
      files_.push_back(write("part-" + std::to_string(i) + ".txt", text));
    }
  }
  std::vector<std::string> files_;
};

S lines(const Dataset& ds) {
  S out;
  for (Element& e : ds) out.push_back(bytes_string(e.at(0)));
  return out;
}

TEST_F(ShardFiles, EachWorkerReadsItsOwnFilesThroughListFilesAndInterleave) {
  Dataset ds =
      Dataset::list_files(path("part-*.txt"), /*shuffle=*/true, /*seed=*/3)
          .interleave([](const Element& e) { return TextLineDataset({bytes_string(e[0])}); }, 2)
          .map([](const Element& e) { return e; })
          .prefetch(2);
  EXPECT_EQ(ds.input_files(), files_);
  Dataset w0 = ds.shard_files(2, 0), w1 = ds.shard_files(2, 1);
  EXPECT_EQ(w0.input_files(), (S{files_[0], files_[2]}));
  EXPECT_EQ(w1.input_files(), (S{files_[1], files_[3]}));
  S a = lines(w0), b = lines(w1);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, (S{"f0-0", "f2-0", "f2-1", "f2-2"}));
  EXPECT_EQ(b, (S{"f1-0", "f1-1", "f3-0", "f3-1", "f3-2", "f3-3"}));
  // The original pipeline is unchanged.
  EXPECT_EQ(lines(ds).size(), 10u);
}

TEST_F(ShardFiles, ShardsFileSourcesDirectlyAndZippedInputs) {
  Dataset ds = Dataset::zip({TextLineDataset(files_), Dataset::range(100)}).batch(2);
  Dataset w = ds.shard_files(4, 3);
  EXPECT_EQ(w.input_files(), S{files_[3]});
  int64_t rows = 0;
  for (Element& e : w) rows += e[1].dim(0);
  EXPECT_EQ(rows, 4);
}

TEST_F(ShardFiles, RepeatsForeverSeesAnEndlessRepeatOverFiles) {
  Dataset files = TextLineDataset(files_);
  EXPECT_EQ(files.repeat().cardinality(), Dataset::kUnknown);  // as tf.data's
  EXPECT_TRUE(repeats_forever(files.repeat().batch(2).map([](const Element& e) { return e; })));
  EXPECT_FALSE(repeats_forever(files.repeat(3).batch(2)));
  EXPECT_FALSE(repeats_forever(Dataset::range(0).repeat()));
  EXPECT_TRUE(repeats_forever(Dataset::zip({Dataset::range(3).repeat(), files})));
}

TEST_F(ShardFiles, FewerFilesThanShardsOrNoFilesIsInvalidArgument) {
  try {
    TextLineDataset(files_).shard_files(5, 0);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("4 file(s), fewer than the 5 shards"));
  }
  EXPECT_THROW(Dataset::range(10).shard_files(2, 0), InvalidArgument);
  EXPECT_TRUE(Dataset::range(10).input_files().empty());
  EXPECT_TRUE(Dataset::from_strings({"a"}).input_files().empty());
}

}  // namespace
}  // namespace lockstep
