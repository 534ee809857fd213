#pragma once
// Sharing the end of a task with idle threads; internal to the library (core, used by ops and the
// step engine). The training step runs each replica's forward and backward as one task, and the
// replicas rarely finish together: a thread done with its own waits for the last. A kernel inside
// a task that splits its work into independent blocks (for_each_block) posts them on the board of
// the thread it runs on; an idle thread of the same step takes blocks from there
// (BlockBoard::help) while the task's own thread takes the rest.
//
// The split is a function of the work alone, never of who helps: each block computes the same
// bits on whatever thread runs it, so the result does not depend on the number of threads or on
// the timing. Outside a BlockBoardScope (no pool, one thread) the blocks run in order on the
// calling thread.
#include <atomic>
#include <functional>
#include <type_traits>

namespace lockstep {

// A loop's body by reference, without std::function's allocation (the step calls it every time):
// `call(context, b)` runs block b.
struct BlockBody {
  void* context;
  void (*call)(void* context, int block);
};

class BlockBoard {
 public:
  BlockBoard() = default;
  BlockBoard(const BlockBoard&) = delete;
  BlockBoard& operator=(const BlockBoard&) = delete;

  // Runs blocks of the loop posted here, if one is, until none is left to take; returns whether
  // it ran any. The caller establishes the floating-point mode the posting task runs in.
  bool help();
  // Whether a loop is posted (a hint: help() may find its blocks all taken).
  bool has_blocks() const;
  // Called on the posting thread right after a loop is posted: how the idle threads hear of it.
  void set_on_post(std::function<void()> on_post) { on_post_ = std::move(on_post); }

 private:
  friend void for_each_block(int, BlockBody);
  struct Loop;
  std::atomic<Loop*> loop_{nullptr};
  // Helpers between reading loop_ and leaving it: the poster waits for them before its loop
  // (on its stack) goes away.
  std::atomic<int> visitors_{0};
  std::function<void()> on_post_;
};

// While alive, for_each_block on this thread posts its blocks on `board` (nullptr: none).
class BlockBoardScope {
 public:
  explicit BlockBoardScope(BlockBoard* board);
  ~BlockBoardScope();
  BlockBoardScope(const BlockBoardScope&) = delete;
  BlockBoardScope& operator=(const BlockBoardScope&) = delete;

 private:
  BlockBoard* previous_;
};

// Runs body(b) for every b in [0, n): on this thread and, inside a BlockBoardScope, on threads
// that help. Blocks must be independent and write disjoint memory. Returns when every block is
// done; rethrows the exception of the lowest failing block.
void for_each_block(int n, BlockBody body);
template <typename Body>
void for_each_block(int n, Body&& body) {
  using B = std::remove_reference_t<Body>;
  for_each_block(n, BlockBody{const_cast<void*>(static_cast<const void*>(&body)),
                              [](void* c, int b) { (*static_cast<B*>(c))(b); }});
}

}  // namespace lockstep
