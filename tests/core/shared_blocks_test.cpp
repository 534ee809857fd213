// for_each_block: every block runs exactly once, in order on the calling thread outside a board,
// and partly on a thread that helps inside one; errors come back from the lowest failing block.
#include "core/shared_blocks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace lockstep {
namespace {

TEST(SharedBlocks, OutsideABoardTheBlocksRunInOrderOnTheCallingThread) {
  std::vector<int> order;
  const auto self = std::this_thread::get_id();
  for_each_block(5, [&](int b) {
    EXPECT_EQ(std::this_thread::get_id(), self);
    order.push_back(b);
  });
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  for_each_block(0, [&](int) { ADD_FAILURE() << "no block to run"; });
}

TEST(SharedBlocks, HelpFindsNothingWhenNoLoopIsPosted) {
  BlockBoard board;
  EXPECT_FALSE(board.has_blocks());
  EXPECT_FALSE(board.help());
  // A loop run outside the board's scope is not posted on it.
  for_each_block(3, [](int) {});
  EXPECT_FALSE(board.help());
}

// The posting thread holds its first block until the helper has run one: the other block must
// have gone to the helper. Every block runs once; the poster returns only after the helper's
// block is done.
TEST(SharedBlocks, AnIdleThreadTakesBlocksOfAPostedLoop) {
  for (int n : {2, 3, 8}) {
    BlockBoard board;
    std::atomic<int> posts{0};
    board.set_on_post([&] { posts.fetch_add(1); });
    std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
    std::vector<std::thread::id> ran_on(static_cast<size_t>(n));
    std::mutex mu;
    std::condition_variable cv;
    int helper_blocks = 0;
    std::atomic<bool> stop{false};
    std::thread::id helper_thread;
    const auto poster = std::this_thread::get_id();
    std::thread helper([&] {
      while (!stop.load()) board.help();
    });
    helper_thread = helper.get_id();
    {
      const BlockBoardScope scope(&board);
      for_each_block(n, [&](int b) {
        runs[static_cast<size_t>(b)].fetch_add(1);
        ran_on[static_cast<size_t>(b)] = std::this_thread::get_id();
        std::unique_lock lock(mu);
        if (std::this_thread::get_id() == poster) {
          // Bounded, so that a helper that never helps fails the test instead of hanging it.
          EXPECT_TRUE(
              cv.wait_for(lock, std::chrono::seconds(60), [&] { return helper_blocks > 0; }))
              << "no block of " << n << " reached the helping thread";
        } else {
          ++helper_blocks;
          cv.notify_all();
        }
      });
    }
    // Every block is done when for_each_block returns, the helper's included.
    for (int b = 0; b < n; ++b) EXPECT_EQ(runs[static_cast<size_t>(b)].load(), 1) << b;
    int on_helper = 0;
    for (const auto& id : ran_on) on_helper += id == helper_thread ? 1 : 0;
    EXPECT_GE(on_helper, 1);
    EXPECT_EQ(posts.load(), 1);
    EXPECT_FALSE(board.has_blocks());
    stop.store(true);
    helper.join();
  }
}

TEST(SharedBlocks, TheLowestFailingBlocksErrorIsRethrown) {
  const auto body = [](int b) {
    if (b == 1 || b == 3) throw std::runtime_error("block " + std::to_string(b));
  };
  try {
    for_each_block(5, body);
    ADD_FAILURE() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "block 1");
  }
  // Posted, with nobody helping: the poster runs every block and still reports block 1.
  BlockBoard board;
  const BlockBoardScope scope(&board);
  std::atomic<int> ran{0};
  try {
    for_each_block(5, [&](int b) {
      ran.fetch_add(1);
      body(b);
    });
    ADD_FAILURE() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "block 1");
  }
  EXPECT_EQ(ran.load(), 5);
  EXPECT_FALSE(board.has_blocks());
}

// A block that splits its own work runs those blocks in order on its thread: the board holds one
// loop at a time, and the outer loop's stays posted.
TEST(SharedBlocks, ALoopInsideABlockRunsInOrderOnItsThread) {
  BlockBoard board;
  std::atomic<int> posts{0};
  board.set_on_post([&] { posts.fetch_add(1); });
  const BlockBoardScope scope(&board);
  std::vector<int> inner;
  for_each_block(2, [&](int b) {
    EXPECT_TRUE(board.has_blocks());
    const auto self = std::this_thread::get_id();
    for_each_block(3, [&](int i) {
      EXPECT_EQ(std::this_thread::get_id(), self);
      inner.push_back(b * 10 + i);
    });
  });
  EXPECT_EQ(inner, (std::vector<int>{0, 1, 2, 10, 11, 12}));
  EXPECT_EQ(posts.load(), 1);
}

}  // namespace
}  // namespace lockstep
