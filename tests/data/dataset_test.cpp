#include "lockstep/data/dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <numeric>

#include "test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_data::batches;
using testing_data::generator_range;
using testing_data::scalar_element;
using testing_data::scalars;
using testing_data::scalars_from;
using V = std::vector<int64_t>;

Element add_one(const Element& e) {
  return scalar_element(static_cast<int64_t>(e[0].item()) + 1);
}

// ----- sources

TEST(Range, YieldsLikePythonRange) {
  EXPECT_EQ(scalars(Dataset::range(5)), (V{0, 1, 2, 3, 4}));
  EXPECT_EQ(scalars(Dataset::range(2, 10, 3)), (V{2, 5, 8}));
  EXPECT_EQ(scalars(Dataset::range(5, 0, -2)), (V{5, 3, 1}));
  EXPECT_EQ(scalars(Dataset::range(3, 3)), V{});
  EXPECT_EQ(Dataset::range(2, 10, 3).cardinality(), 3);
  EXPECT_THROW(Dataset::range(0, 5, 0), InvalidArgument);
}

TEST(FromTensorSlices, ElementsAreZeroCopyRowViews) {
  Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {3, 2});
  Tensor y = Tensor::from_vector<int32_t>({7, 8, 9}, {3});
  Dataset ds = Dataset::from_tensor_slices({x, y});
  EXPECT_EQ(ds.cardinality(), 3);
  Iterator it = ds.make_iterator();
  for (int i = 0; i < 3; ++i) {
    std::optional<Element> e = it.next();
    ASSERT_TRUE(e);
    ASSERT_EQ(e->size(), 2u);
    EXPECT_TRUE((*e)[0].shares_storage_with(x));
    EXPECT_EQ((*e)[0].data<float>(), x.data<float>() + 2 * i);
    EXPECT_EQ((*e)[0].shape(), Shape({2}));
    EXPECT_EQ((*e)[1].shape(), Shape({}));
    EXPECT_EQ((*e)[1].item(), 7 + i);
  }
  EXPECT_FALSE(it.next());
  EXPECT_FALSE(it.next());
}

TEST(FromTensorSlices, RejectsMismatchedLeadingDimensions) {
  Tensor x = Tensor::zeros({3, 2});
  Tensor y = Tensor::zeros({4});
  try {
    Dataset::from_tensor_slices({x, y});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("float32[3, 2]"));
    EXPECT_THAT(e.what(), HasSubstr("float32[4]"));
  }
  EXPECT_THROW(Dataset::from_tensor_slices(Tensor::scalar(1)), InvalidArgument);
}

TEST(FromGenerator, YieldsGeneratedElementsAndChecksTheSpec) {
  EXPECT_EQ(scalars(generator_range(4)), (V{0, 1, 2, 3}));
  EXPECT_EQ(generator_range(4).cardinality(), Dataset::kUnknown);
  Dataset bad = Dataset::from_generator(
      [] { return []() -> std::optional<Element> { return Element{Tensor::zeros({2})}; }; },
      {TensorSpec{{3}, DType::float32}});
  Iterator it = bad.make_iterator();
  try {
    it.next();
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("float32[2]"));
    EXPECT_THAT(e.what(), HasSubstr("float32[3]"));
  }
}

TEST(Zip, ConcatenatesTuplesAndStopsAtTheShortest) {
  Dataset z = Dataset::zip({Dataset::range(3), Dataset::range(10, 20)});
  EXPECT_EQ(z.cardinality(), 3);
  EXPECT_EQ(scalars(z, 0), (V{0, 1, 2}));
  EXPECT_EQ(scalars(z, 1), (V{10, 11, 12}));
  EXPECT_EQ(z.element_spec().size(), 2u);
  EXPECT_EQ(Dataset::zip({Dataset::range(3).repeat(), Dataset::range(2)}).cardinality(), 2);
}

// ----- map / filter

TEST(Map, AppliesTheFunctionToEveryElement) {
  EXPECT_EQ(scalars(Dataset::range(4).map(add_one)), (V{1, 2, 3, 4}));
  EXPECT_EQ(Dataset::range(4).map(add_one).cardinality(), 4);
}

TEST(Map, ElementSpecIsLearnedFromTheFirstElementOrGiven) {
  Dataset m = Dataset::range(4).map([](const Element& e) {
    return Element{Tensor::full({2, 3}, e[0].item()), e[0]};
  });
  ElementSpec spec = m.element_spec();
  ASSERT_EQ(spec.size(), 2u);
  EXPECT_EQ(spec[0].to_string(), "float32[2, 3]");
  EXPECT_EQ(spec[1].to_string(), "int64[]");
  Dataset given = Dataset::range(4).map(
      add_one, MapOptions{.output_spec = ElementSpec{TensorSpec{{}, DType::int64}}});
  EXPECT_EQ(given.element_spec()[0].to_string(), "int64[]");
}

TEST(Filter, KeepsElementsThatSatisfyThePredicate) {
  Dataset even = Dataset::range(10).filter(
      [](const Element& e) { return static_cast<int64_t>(e[0].item()) % 2 == 0; });
  EXPECT_EQ(scalars(even), (V{0, 2, 4, 6, 8}));
  EXPECT_EQ(even.cardinality(), Dataset::kUnknown);
}

// ----- shuffle

TEST(Shuffle, SameSeedGivesSamePermutation) {
  V a = scalars(Dataset::range(100).shuffle(100, 7));
  V b = scalars(Dataset::range(100).shuffle(100, 7));
  EXPECT_EQ(a, b);
  V sorted = a;
  std::sort(sorted.begin(), sorted.end());
  V expected(100);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(sorted, expected);  // a permutation
  EXPECT_NE(a, expected);       // and not the identity
}

TEST(Shuffle, DifferentSeedsGiveDifferentOrders) {
  EXPECT_NE(scalars(Dataset::range(100).shuffle(100, 1)),
            scalars(Dataset::range(100).shuffle(100, 2)));
}

TEST(Shuffle, BufferOfOneKeepsTheOrder) {
  EXPECT_EQ(scalars(Dataset::range(6).shuffle(1, 3)), (V{0, 1, 2, 3, 4, 5}));
}

TEST(Shuffle, ElementsMoveForwardAtMostBufferSizeMinusOne) {
  // With a buffer of 3, output k is drawn from inputs [0, k + 2].
  V out = scalars(Dataset::range(50).shuffle(3, 11));
  ASSERT_EQ(out.size(), 50u);
  for (size_t k = 0; k < out.size(); ++k) EXPECT_LE(out[k], static_cast<int64_t>(k) + 2);
}

TEST(Shuffle, IndexPathAndElementPathGiveTheSameOrder) {
  // range() is random access (the buffer holds indices); the generator is not (the buffer holds
  // elements). The algorithm and its random draws are the same, so the orders must be too.
  for (int64_t buffer : {1, 4, 10, 64}) {
    EXPECT_EQ(scalars(Dataset::range(40).shuffle(buffer, 5)),
              scalars(generator_range(40).shuffle(buffer, 5)))
        << "buffer " << buffer;
  }
}

TEST(Shuffle, BatchedIndexPathGivesTheElementPathsOrder) {
  // Batching a random-access shuffle draws a whole batch's slots before reading them; the order
  // must still be the element path's, while the buffer refills (buffer < size), once it only
  // shrinks, across epochs, and in the last, partial batch.
  for (int64_t buffer : {1, 4, 10, 39, 40, 64}) {
    for (int64_t batch : {1, 3, 7, 40}) {
      std::vector<int64_t> batched;
      auto it = Dataset::range(40).shuffle(buffer, 9).repeat(2).batch(batch).make_iterator();
      while (auto e = it.next()) {
        for (int64_t v : (*e)[0].to_vector<int64_t>()) batched.push_back(v);
      }
      EXPECT_EQ(batched, scalars(generator_range(40).shuffle(buffer, 9).repeat(2)))
          << "buffer " << buffer << ", batch " << batch;
    }
  }
}

TEST(Shuffle, ReshuffleEachIterationChangesTheOrderEachEpoch) {
  V two = scalars(Dataset::range(20).shuffle(20, 9).repeat(2));
  ASSERT_EQ(two.size(), 40u);
  V e1(two.begin(), two.begin() + 20), e2(two.begin() + 20, two.end());
  EXPECT_NE(e1, e2);
  std::sort(e1.begin(), e1.end());
  std::sort(e2.begin(), e2.end());
  EXPECT_EQ(e1, e2);  // both epochs are permutations of the same elements
}

TEST(Shuffle, WithoutReshuffleEveryEpochHasTheSameOrder) {
  V two = scalars(Dataset::range(20).shuffle(20, 9, false).repeat(2));
  EXPECT_EQ(V(two.begin(), two.begin() + 20), V(two.begin() + 20, two.end()));
}

TEST(Shuffle, NewIteratorsOfOneDatasetReshuffleButFreshPipelinesAgree) {
  Dataset ds = Dataset::range(30).shuffle(30, 4);
  V first = scalars(ds), second = scalars(ds);
  EXPECT_NE(first, second);
  EXPECT_EQ(first, scalars(Dataset::range(30).shuffle(30, 4)));
}

TEST(Shuffle, RejectsNonPositiveBuffer) {
  EXPECT_THROW(Dataset::range(3).shuffle(0, 1), InvalidArgument);
}

// ----- repeat / take / skip

TEST(Repeat, RepeatsTheGivenNumberOfTimes) {
  EXPECT_EQ(scalars(Dataset::range(3).repeat(2)), (V{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(Dataset::range(3).repeat(2).cardinality(), 6);
  EXPECT_EQ(scalars(Dataset::range(3).repeat(0)), V{});
}

TEST(Repeat, ForeverWithTakeStopsExactlyAtTheBoundary) {
  EXPECT_EQ(scalars(Dataset::range(3).repeat().take(7)), (V{0, 1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(scalars(Dataset::range(3).repeat().take(6)), (V{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(Dataset::range(3).repeat().cardinality(), Dataset::kInfinite);
  EXPECT_EQ(Dataset::range(3).repeat().take(7).cardinality(), 7);
}

TEST(Repeat, OfAnEmptyDatasetEnds) {
  EXPECT_EQ(scalars(Dataset::range(0).repeat()), V{});
  EXPECT_EQ(scalars(generator_range(0).repeat()), V{});
}

TEST(TakeSkip, SelectTheRequestedWindow) {
  EXPECT_EQ(scalars(Dataset::range(10).skip(3).take(4)), (V{3, 4, 5, 6}));
  EXPECT_EQ(scalars(Dataset::range(4).take(-1)), (V{0, 1, 2, 3}));
  EXPECT_EQ(scalars(Dataset::range(4).take(10)), (V{0, 1, 2, 3}));
  EXPECT_EQ(scalars(Dataset::range(4).skip(10)), V{});
  EXPECT_EQ(scalars(Dataset::range(4).skip(-1)), V{});
  EXPECT_EQ(scalars(generator_range(10).skip(8)), (V{8, 9}));
  EXPECT_EQ(Dataset::range(10).skip(3).cardinality(), 7);
  EXPECT_EQ(Dataset::range(10).take(3).cardinality(), 3);
}

// ----- shard

TEST(Shard, ElementIGoesToShardIModN) {
  EXPECT_EQ(scalars(Dataset::range(10).shard(3, 0)), (V{0, 3, 6, 9}));
  EXPECT_EQ(scalars(Dataset::range(10).shard(3, 1)), (V{1, 4, 7}));
  EXPECT_EQ(scalars(Dataset::range(10).shard(3, 2)), (V{2, 5, 8}));
  EXPECT_EQ(scalars(generator_range(10).shard(3, 1)), (V{1, 4, 7}));
  EXPECT_EQ(Dataset::range(10).shard(3, 0).cardinality(), 4);
  EXPECT_EQ(Dataset::range(10).shard(3, 2).cardinality(), 3);
  EXPECT_THROW(Dataset::range(10).shard(3, 3), InvalidArgument);
}

TEST(Shard, ThenShuffleAndBatchKeepsTheShardsElements) {
  V got;
  for (auto& b : batches(Dataset::range(20).shard(4, 3).shuffle(10, 1).batch(2))) {
    got.insert(got.end(), b.begin(), b.end());
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (V{3, 7, 11, 15, 19}));
}

// ----- batch / unbatch

TEST(Batch, StacksConsecutiveElementsAndKeepsThePartialLastBatch) {
  EXPECT_THAT(batches(Dataset::range(7).batch(3)), ElementsAre(V{0, 1, 2}, V{3, 4, 5}, V{6}));
  EXPECT_EQ(Dataset::range(7).batch(3).cardinality(), 3);
}

TEST(Batch, DropRemainderDropsThePartialLastBatch) {
  EXPECT_THAT(batches(Dataset::range(7).batch(3, true)), ElementsAre(V{0, 1, 2}, V{3, 4, 5}));
  EXPECT_EQ(Dataset::range(7).batch(3, true).cardinality(), 2);
}

TEST(Batch, GenericPathMatchesTheGatherPath) {
  EXPECT_THAT(batches(generator_range(7).batch(3)), ElementsAre(V{0, 1, 2}, V{3, 4, 5}, V{6}));
  EXPECT_THAT(batches(generator_range(7).batch(3, true)), ElementsAre(V{0, 1, 2}, V{3, 4, 5}));
}

TEST(Batch, CrossesRepeatBoundaries) {
  EXPECT_THAT(batches(Dataset::range(3).repeat(2).batch(4)), ElementsAre(V{0, 1, 2, 0}, V{1, 2}));
  EXPECT_THAT(batches(Dataset::range(3).repeat().batch(4).take(3)),
              ElementsAre(V{0, 1, 2, 0}, V{1, 2, 0, 1}, V{2, 0, 1, 2}));
}

TEST(Batch, ProducesContiguousBatchTensorsOfEveryComponent) {
  Tensor x = Tensor::from_vector<uint8_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {5, 2});
  Tensor y = Tensor::from_vector<int32_t>({10, 11, 12, 13, 14}, {5});
  Iterator it = Dataset::from_tensor_slices({x, y}).batch(2).make_iterator();
  std::optional<Element> b = it.next();
  ASSERT_TRUE(b);
  EXPECT_EQ((*b)[0].shape(), Shape({2, 2}));
  EXPECT_EQ((*b)[0].dtype(), DType::uint8);
  EXPECT_FALSE((*b)[0].shares_storage_with(x));
  EXPECT_EQ((*b)[0].to_vector<int>(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ((*b)[1].to_vector<int>(), (std::vector<int>{10, 11}));
  it.next();
  b = it.next();
  ASSERT_TRUE(b);
  EXPECT_EQ((*b)[0].shape(), Shape({1, 2}));
  EXPECT_EQ((*b)[0].to_vector<int>(), (std::vector<int>{8, 9}));
  EXPECT_EQ((*b)[1].to_vector<int>(), (std::vector<int>{14}));
}

TEST(Batch, ElementSpecHasAnUnknownBatchDimensionUnlessDropRemainder) {
  Dataset ds = Dataset::from_tensor_slices(
      {Tensor::zeros({10, 28, 28}, DType::uint8), Tensor::zeros({10}, DType::uint8)});
  EXPECT_EQ(to_string(ds.batch(4).element_spec()), "(uint8[?, 28, 28], uint8[?])");
  EXPECT_EQ(to_string(ds.batch(4, true).element_spec()), "(uint8[4, 28, 28], uint8[4])");
}

TEST(Batch, RejectsElementsOfDifferentShapes) {
  Dataset ragged = Dataset::range(1, 4).map(
      [](const Element& e) { return Element{Tensor::zeros({static_cast<int64_t>(e[0].item())})}; });
  Iterator it = ragged.batch(3).make_iterator();
  try {
    it.next();
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("float32[2]"));
    EXPECT_THAT(e.what(), HasSubstr("float32[3, 1]"));
  }
}

TEST(Unbatch, SplitsBatchesBackIntoElements) {
  EXPECT_EQ(scalars(Dataset::range(7).batch(3).unbatch()), (V{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(to_string(Dataset::range(7).batch(3).unbatch().element_spec()), "(int64[])");
}

// ----- prefetch / cache

TEST(Prefetch, YieldsTheSameSequence) {
  EXPECT_EQ(scalars(Dataset::range(50).prefetch(4)), scalars(Dataset::range(50)));
  EXPECT_EQ(scalars(Dataset::range(50).shuffle(50, 3).prefetch(Dataset::AUTOTUNE)),
            scalars(Dataset::range(50).shuffle(50, 3)));
  EXPECT_EQ(scalars(Dataset::range(0).prefetch(2)), V{});
  EXPECT_THROW(Dataset::range(3).prefetch(0), InvalidArgument);
}

TEST(Cache, InMemoryComputesTheUpstreamOnlyOnce) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  Dataset ds = Dataset::range(4)
                   .map([calls](const Element& e) {
                     ++*calls;
                     return add_one(e);
                   })
                   .cache()
                   .repeat(3);
  EXPECT_EQ(scalars(ds), (V{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}));
  EXPECT_EQ(calls->load(), 4);
}

// ----- iteration and state

TEST(Iterator, RangeForVisitsEveryElement) {
  int64_t sum = 0;
  for (Element& e : Dataset::range(5)) sum += static_cast<int64_t>(e[0].item());
  EXPECT_EQ(sum, 10);
}

TEST(IteratorState, RestoredIteratorContinuesTheSameSequence) {
  Tensor x = Tensor::from_vector<int64_t>(
      [] {
        std::vector<int64_t> v(23);
        std::iota(v.begin(), v.end(), 100);
        return v;
      }(),
      {23});
  Dataset ds = Dataset::from_tensor_slices(x).shuffle(23, 5).repeat().batch(4);
  Iterator it = ds.make_iterator();
  Element e;
  for (int i = 0; i < 13; ++i) it.next(e);  // into the third epoch
  IteratorState saved = it.state();
  EXPECT_EQ(saved.position, 13);
  std::vector<std::vector<int64_t>> expected;
  for (int i = 0; i < 10; ++i) {
    it.next(e);
    expected.push_back(e[0].to_vector<int64_t>());
  }
  Iterator restored = ds.make_iterator(saved);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(restored.next(e));
    EXPECT_EQ(e[0].to_vector<int64_t>(), expected[static_cast<size_t>(i)]) << "batch " << i;
  }
}

TEST(IteratorState, WorksThroughMapAndPrefetchAndGenericStages) {
  Dataset ds = generator_range(17).shuffle(5, 2).map(add_one, 2).repeat(3).batch(3).prefetch(2);
  Iterator it = ds.make_iterator();
  Element e;
  for (int i = 0; i < 7; ++i) it.next(e);
  IteratorState saved = it.state();
  std::vector<std::vector<int64_t>> rest;
  while (it.next(e)) rest.push_back(e[0].to_vector<int64_t>());
  Iterator restored = ds.make_iterator(saved);
  std::vector<std::vector<int64_t>> again;
  while (restored.next(e)) again.push_back(e[0].to_vector<int64_t>());
  EXPECT_EQ(again, rest);
  EXPECT_EQ(rest.size(), 17u - 7u);  // 51 elements -> 17 batches
}

TEST(IteratorState, RestoringPastTheEndIsAnError) {
  EXPECT_THROW(Dataset::range(3).make_iterator(IteratorState{0, 4}), OutOfRange);
}

TEST(Cardinality, FollowsTfDataRules) {
  Dataset r = Dataset::range(10);
  EXPECT_EQ(r.batch(4).cardinality(), 3);
  EXPECT_EQ(r.repeat().batch(4).cardinality(), Dataset::kInfinite);
  EXPECT_EQ(r.filter([](const Element&) { return true; }).cardinality(), Dataset::kUnknown);
  EXPECT_EQ(r.shuffle(3, 1).prefetch(2).cardinality(), 10);
  EXPECT_EQ(generator_range(3).repeat().cardinality(), Dataset::kUnknown);
  EXPECT_EQ(r.repeat().skip(5).cardinality(), Dataset::kInfinite);
}

TEST(Dataset, ToStringDescribesThePipeline) {
  EXPECT_EQ(
      Dataset::range(10).shuffle(10, 1).repeat().batch(4).prefetch(Dataset::AUTOTUNE).to_string(),
      "Range(0, 10, 1) -> Shuffle(10) -> Repeat(-1) -> Batch(4) -> Prefetch(AUTOTUNE)");
}

}  // namespace
}  // namespace lockstep
