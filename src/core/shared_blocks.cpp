#include "core/shared_blocks.h"

#include <sched.h>

#include <climits>
#include <exception>
#include <mutex>

#include "core/futex.h"

namespace lockstep {

struct BlockBoard::Loop {
  BlockBody body{};
  int n = 0;
  std::atomic<int> next{0};
  std::mutex error_mu;
  std::exception_ptr error;
  int error_block = INT_MAX;

  // Runs blocks until none is left to take; whether it ran any.
  bool run_blocks() {
    bool ran = false;
    for (int b = next.fetch_add(1, std::memory_order_relaxed); b < n;
         b = next.fetch_add(1, std::memory_order_relaxed)) {
      ran = true;
      try {
        body.call(body.context, b);
      } catch (...) {
        std::lock_guard lock(error_mu);
        if (b < error_block) {
          error = std::current_exception();
          error_block = b;
        }
      }
    }
    return ran;
  }
};

namespace {
thread_local BlockBoard* current_board = nullptr;
}  // namespace

BlockBoardScope::BlockBoardScope(BlockBoard* board) : previous_(current_board) {
  current_board = board;
}

BlockBoardScope::~BlockBoardScope() {
  current_board = previous_;
}

bool BlockBoard::has_blocks() const {
  return loop_.load(std::memory_order_relaxed) != nullptr;
}

bool BlockBoard::help() {
  if (loop_.load(std::memory_order_relaxed) == nullptr) return false;
  // Counted before the loop is read (both sequentially consistent): a poster that took its loop
  // down and then saw no visitor knows that none can still reach it.
  visitors_.fetch_add(1, std::memory_order_seq_cst);
  const BlockBoardScope nested(nullptr);
  Loop* loop = loop_.load(std::memory_order_seq_cst);
  const bool ran = loop != nullptr && loop->run_blocks();
  visitors_.fetch_sub(1, std::memory_order_release);
  return ran;
}

void for_each_block(int n, BlockBody body) {
  BlockBoard* board = current_board;
  if (board == nullptr || n <= 1) {
    for (int b = 0; b < n; ++b) body.call(body.context, b);
    return;
  }
  BlockBoard::Loop loop;
  loop.body = body;
  loop.n = n;
  board->loop_.store(&loop, std::memory_order_seq_cst);
  if (board->on_post_) board->on_post_();
  {
    // A block that splits its own work runs it in order: the board holds one loop at a time.
    const BlockBoardScope nested(nullptr);
    loop.run_blocks();
  }
  board->loop_.store(nullptr, std::memory_order_seq_cst);
  // A helper still in the loop runs its last block: usually a few microseconds more.
  for (int i = 0; board->visitors_.load(std::memory_order_acquire) != 0; ++i) {
    if (i < 4096) {
      os::cpu_relax();
    } else {
      sched_yield();
    }
  }
  if (loop.error) std::rethrow_exception(loop.error);
}

}  // namespace lockstep
