// BackgroundReducer over a shared-memory group (ranks = threads): buckets enqueued one after the
// other are all-reduced on each rank's communication thread while the caller goes on; results are
// the closed forms of what each rank contributed, and a lost rank's error reaches wait().
#include "lockstep/distribute/background_reducer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/distribute/shared_memory_group.h"
#include "testing/collective_values.h"
#include "testing/run_threads.h"

namespace lockstep::distribute {
namespace {

using testing::closed_sum;
using testing::contribution;
using ::testing::HasSubstr;

void run_ranks(SharedMemoryGroup& group, const std::function<void(int)>& fn) {
  testing::run_threads(group.size(), fn);
}

TEST(BackgroundReducer, SumsEveryBucketInOrderWhileTheCallerContinues) {
  for (int n : {1, 2, 3}) {
    SharedMemoryGroup group(n, {.timeout_seconds = 60});
    const std::vector<size_t> sizes = {13, 314, 1, 4099};
    run_ranks(group, [&](int r) {
      BackgroundReducer reducer(group.communicator(r));
      for (int step = 0; step < 3; ++step) {  // the reducer is reused step after step
        std::vector<std::vector<float>> buckets;
        for (size_t s : sizes) {
          std::vector<float> b(s);
          for (size_t i = 0; i < s; ++i) b[i] = static_cast<float>(contribution(r, i) + step);
          buckets.push_back(std::move(b));
        }
        // Enqueue all, then wait once: the caller never blocks between buckets.
        for (auto& b : buckets) reducer.enqueue(b.data(), b.size(), DType::float32, ReduceOp::SUM);
        reducer.wait();
        for (auto& b : buckets) {
          for (size_t i = 0; i < b.size(); ++i) {
            ASSERT_EQ(b[i], closed_sum(n, i) + n * step) << "n " << n << " element " << i;
          }
        }
      }
      EXPECT_EQ(reducer.completed(), 3 * sizes.size());
    });
  }
}

TEST(BackgroundReducer, ALostRanksTimeoutReachesWaitAndLaterCalls) {
  SharedMemoryGroup group(2, {.timeout_seconds = 0.5});
  std::vector<std::string> errors(2);
  run_ranks(group, [&](int r) {
    if (r == 1) return;  // rank 1 never joins
    BackgroundReducer reducer(group.communicator(r));
    std::vector<float> a(10, 1.0f), b(20, 1.0f);
    reducer.enqueue(a.data(), a.size(), DType::float32, ReduceOp::SUM);
    reducer.enqueue(b.data(), b.size(), DType::float32, ReduceOp::SUM);
    try {
      reducer.wait();
      ADD_FAILURE() << "wait() returned although rank 1 never joined";
    } catch (const DeadlineExceeded& e) {
      errors[0] = e.what();
    }
    // The group is broken: enqueue and wait keep reporting it instead of hanging.
    EXPECT_THROW(reducer.enqueue(a.data(), a.size(), DType::float32, ReduceOp::SUM),
                 DeadlineExceeded);
    EXPECT_THROW(reducer.wait(), DeadlineExceeded);
    EXPECT_EQ(reducer.completed(), 0u);
  });
  EXPECT_THAT(errors[0], HasSubstr("rank 1 did not arrive"));
  EXPECT_THAT(errors[0], HasSubstr("all_reduce #1 (float32[10], SUM)"));
}

TEST(BackgroundReducer, WaitWithNothingQueuedReturnsAndANullCommunicatorIsRefused) {
  SharedMemoryGroup group(1);
  BackgroundReducer reducer(group.communicator(0));
  reducer.wait();
  EXPECT_EQ(reducer.completed(), 0u);
  EXPECT_THROW(BackgroundReducer(nullptr), InvalidArgument);
}

}  // namespace
}  // namespace lockstep::distribute
