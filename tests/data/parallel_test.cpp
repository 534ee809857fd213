// Background stages: parallel map and prefetch keep order, propagate errors, and shut down cleanly
// at any point (run under ASan and TSan as well).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "lockstep/data/dataset.h"
#include "test_util.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using testing_data::scalar_element;
using testing_data::scalars;
using testing_data::scalars_from;
using V = std::vector<int64_t>;

// A map whose cost varies a lot from element to element, so that parallel calls finish out of
// order. Deterministic work (no sleeps): a short LCG loop.
Element uneven_square(const Element& e) {
  int64_t v = static_cast<int64_t>(e[0].item());
  uint64_t x = static_cast<uint64_t>(v);
  int64_t spins = (v % 5 == 0) ? 20000 : 10;
  for (int64_t i = 0; i < spins; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
  Element out = scalar_element(v * v);
  out.push_back(scalar_element(static_cast<int64_t>(x & 1))[0]);
  return out;
}

V squares(int64_t n) {
  V v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i * i;
  return v;
}

TEST(ParallelMap, KeepsInputOrder) {
  for (int64_t calls : {int64_t{1}, int64_t{2}, int64_t{4}, Dataset::AUTOTUNE}) {
    EXPECT_EQ(scalars(Dataset::range(60).map(uneven_square, calls)), squares(60))
        << "num_parallel_calls " << calls;
  }
}

TEST(ParallelMap, NonDeterministicYieldsEveryResultOnce) {
  V got = scalars(Dataset::range(60).map(uneven_square, 3, /*deterministic=*/false));
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, squares(60));
}

TEST(ParallelMap, KeepsOrderAfterShuffleWithASeed) {
  EXPECT_EQ(scalars(Dataset::range(40).shuffle(40, 8).map(uneven_square, 4)),
            scalars(Dataset::range(40).shuffle(40, 8).map(uneven_square)));
}

TEST(ParallelMap, ErrorsArriveInOrderAfterTheEarlierResults) {
  Dataset ds = Dataset::range(10).map(
      [](const Element& e) {
        if (e[0].item() == 5) throw InvalidArgument("bad element 5");
        return e;
      },
      3);
  Iterator it = ds.make_iterator();
  EXPECT_EQ(scalars_from(it, 5), (V{0, 1, 2, 3, 4}));
  try {
    it.next();
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("bad element 5"));
  }
}

TEST(ParallelMap, RejectsNegativeParallelism) {
  EXPECT_THROW(Dataset::range(3).map(uneven_square, -2), InvalidArgument);
}

// The nice value of every thread of this process, from /proc (field 19 of /proc/self/task/T/stat).
std::vector<int> thread_nice_values() {
  std::vector<int> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream f(task.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    // Fields after the parenthesised command name (which may contain spaces).
    std::istringstream rest(stat.substr(stat.rfind(')') + 2));
    std::string field;
    for (int i = 3; i <= 19 && rest >> field; ++i) {
      if (i == 19) out.push_back(std::stoi(field));
    }
  }
  return out;
}

TEST(Prefetch, ProducerThreadRunsAtNice19SoItYieldsToReplicas) {
  const std::vector<int> initial = thread_nice_values();
  const auto before = std::count(initial.begin(), initial.end(), 19);
  // The test may itself run niced (a build beside it, `nice ctest`): compare with where it began.
  const int own = getpriority(PRIO_PROCESS, static_cast<id_t>(gettid()));
  Dataset ds = Dataset::range(1000).prefetch(2);
  Iterator it = ds.make_iterator();
  ASSERT_TRUE(it.next());  // starts the producer
  std::vector<int> nice = thread_nice_values();
  EXPECT_EQ(std::count(nice.begin(), nice.end(), 19), before + 1);
  // The consumer (this thread) keeps its priority.
  EXPECT_EQ(getpriority(PRIO_PROCESS, static_cast<id_t>(gettid())), own);
}

TEST(Prefetch, PropagatesAnUpstreamError) {
  Dataset ds = Dataset::range(10)
                   .map([](const Element& e) {
                     if (e[0].item() == 3) throw DataLoss("lost 3");
                     return e;
                   })
                   .prefetch(4);
  Iterator it = ds.make_iterator();
  EXPECT_EQ(scalars_from(it, 3), (V{0, 1, 2}));
  EXPECT_THROW(it.next(), DataLoss);
  EXPECT_FALSE(it.next());
}

TEST(Prefetch, OfParallelMapKeepsOrderOverManyEpochs) {
  Dataset ds = Dataset::range(30)
                   .map(uneven_square, Dataset::AUTOTUNE)
                   .repeat(3)
                   .prefetch(Dataset::AUTOTUNE);
  V expected;
  for (int i = 0; i < 3; ++i) {
    V s = squares(30);
    expected.insert(expected.end(), s.begin(), s.end());
  }
  EXPECT_EQ(scalars(ds), expected);
}

TEST(EarlyExit, DestroyingParallelMapPrefetchMidStreamNeverHangsOrLeaks) {
  // 1,000 iterators abandoned at different points (before the first element, mid-epoch, while
  // workers are blocked on a full buffer): each destructor must stop and join its threads.
  Dataset ds = Dataset::range(100).map(uneven_square, 2).repeat().prefetch(8);
  int64_t checked = 0;
  for (int i = 0; i < 1000; ++i) {
    Iterator it = ds.make_iterator();
    Element e;
    int64_t n = i % 13;
    for (int64_t k = 0; k < n; ++k) {
      ASSERT_TRUE(it.next(e));
      ASSERT_EQ(static_cast<int64_t>(e[0].item()), k * k);
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(EarlyExit, DestroyingAnAutotunedPipelineBeforeItStartsIsClean) {
  Dataset ds = Dataset::range(10).map(uneven_square, Dataset::AUTOTUNE).prefetch(Dataset::AUTOTUNE);
  for (int i = 0; i < 100; ++i) {
    Iterator it = ds.make_iterator();
    if (i % 2) it.next();
  }
}

}  // namespace
}  // namespace lockstep
