// A dense layer's float32 weight gradient xᵀ·dz runs in blocks of its rows that idle threads may
// take (ops::weight_gradient_blocks, src/core/shared_blocks.h): the split follows the shape
// alone, every element matches a float64 reference within the bound of a float32 dot product,
// and the bytes are the same whether one thread runs the blocks or two share them.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <tuple>
#include <vector>

#include "core/shared_blocks.h"
#include "lockstep/core/random.h"
#include "lockstep/ops/linear.h"
#include "lockstep/ops/matmul.h"

namespace lockstep {
namespace {

Tensor random_tensor(const Shape& shape, uint32_t seed) {
  return Generator(seed, /*stream=*/11).uniform(shape, -1.0, 1.0);
}

struct BlockingGuard {
  ops::WeightGradientBlocking saved = ops::weight_gradient_blocking();
  explicit BlockingGuard(ops::WeightGradientBlocking b) { ops::set_weight_gradient_blocking(b); }
  ~BlockingGuard() { ops::set_weight_gradient_blocking(saved); }
};

struct SharingGuard {
  bool saved = ops::share_weight_gradient_blocks();
  explicit SharingGuard(bool on) { ops::set_share_weight_gradient_blocks(on); }
  ~SharingGuard() { ops::set_share_weight_gradient_blocks(saved); }
};

Tensor weight_gradient(const Tensor& x, const Tensor& dz) {
  const Tensor w(Shape{x.dim(1), dz.dim(1)}, DType::float32);
  return ops::linear_backward(dz, x, w, Tensor(), ops::FusedActivation::none,
                              /*need_dx=*/false, /*need_dkernel=*/true, /*need_dbias=*/false)
      .dkernel;
}

TEST(WeightGradientBlocks, TheSplitFollowsTheShape) {
  const BlockingGuard defaults(ops::WeightGradientBlocking{});
  using ops::weight_gradient_blocks;
  // The seed model's first layer over a replica's 128 examples: three blocks of 272 rows (the
  // last 240).
  EXPECT_EQ(weight_gradient_blocks(784, 128, 128).blocks, 3);
  EXPECT_EQ(weight_gradient_blocks(784, 128, 128).rows, 272);
  // The wide model's middle layer: the most blocks, 256 rows each.
  EXPECT_EQ(weight_gradient_blocks(2048, 2048, 128).blocks, 8);
  EXPECT_EQ(weight_gradient_blocks(2048, 2048, 128).rows, 256);
  // Few rows, however long the sum (a ViT's 64-wide layer over many tokens): one block.
  EXPECT_EQ(weight_gradient_blocks(64, 64, 8320).blocks, 1);
  // Little work: one block.
  EXPECT_EQ(weight_gradient_blocks(784, 10, 128).blocks, 1);
  EXPECT_EQ(weight_gradient_blocks(12, 9, 29).blocks, 1);
  const BlockingGuard small({.macs_per_block = 1, .min_rows = 3});
  EXPECT_EQ(weight_gradient_blocks(12, 9, 29).blocks, 4);
  EXPECT_EQ(weight_gradient_blocks(12, 9, 29).rows, 3);
  EXPECT_EQ(weight_gradient_blocks(70, 5, 9).blocks, 8);
  EXPECT_EQ(weight_gradient_blocks(70, 5, 9).rows, 9);
  EXPECT_THROW(ops::set_weight_gradient_blocking({.macs_per_block = 0, .min_rows = 1}),
               InvalidArgument);
}

// Each element is a float32 dot product over k examples: against the float64 sum its error is at
// most γ_k · Σ|x_ei|·|dz_ej| with γ_k = k·u / (1 − k·u), u = 2⁻²⁴ (Higham, Accuracy and Stability
// of Numerical Algorithms, §3.1), whatever order the kernel adds in.
TEST(WeightGradientBlocks, EveryBlockMatchesAFloat64Reference) {
  const std::vector<std::tuple<int64_t, int64_t, int64_t, ops::WeightGradientBlocking>> cases = {
      {784, 128, 128, ops::WeightGradientBlocking{}},    // the seed model's first layer
      {70, 5, 9, {.macs_per_block = 1, .min_rows = 9}},  // 8 blocks, the last shorter
      {100, 33, 17, {.macs_per_block = 1, .min_rows = 40}},
  };
  uint32_t seed = 3;
  for (const auto& [m, n, k, blocking] : cases) {
    const BlockingGuard guard(blocking);
    const Tensor x = random_tensor({k, m}, seed++), dz = random_tensor({k, n}, seed++);
    const Tensor g = weight_gradient(x, dz);
    const float* xs = x.data<float>();
    const float* ds = dz.data<float>();
    const double u = std::ldexp(1.0, -24);
    const double gamma = static_cast<double>(k) * u / (1 - static_cast<double>(k) * u);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, abs_sum = 0;
        for (int64_t e = 0; e < k; ++e) {
          const double p = static_cast<double>(xs[e * m + i]) * ds[e * n + j];
          sum += p;
          abs_sum += std::fabs(p);
        }
        ASSERT_LE(std::fabs(g.data<float>()[i * n + j] - sum), gamma * abs_sum)
            << m << "x" << n << "x" << k << " at (" << i << ", " << j << ")";
      }
    }
  }
}

// Inside a board's scope with a thread helping, blocks run on both threads: the same bytes as
// the blocks in order on one.
TEST(WeightGradientBlocks, SharedBlocksGiveTheBytesOfOneThread) {
  const BlockingGuard guard({.macs_per_block = 1, .min_rows = 16});
  const SharingGuard sharing(true);
  const Tensor x = random_tensor({64, 256}, 21), dz = random_tensor({64, 48}, 22);
  ASSERT_EQ(ops::weight_gradient_blocks(256, 48, 64).blocks, 8);
  const Tensor alone = weight_gradient(x, dz);
  BlockBoard board;
  std::atomic<bool> stop{false};
  std::atomic<int> helped{0};
  std::thread helper([&] {
    while (!stop.load())
      if (board.help()) helped.fetch_add(1);
  });
  Tensor shared;
  // Repeated: which blocks the helper takes varies from call to call; the bytes may not. Until
  // the helper has taken part (it spins on the board; bounded, so that a board nobody helps
  // fails below rather than hangs).
  for (int r = 0; r < 50 || (helped.load() == 0 && r < 200000); ++r) {
    const BlockBoardScope scope(&board);
    shared = weight_gradient(x, dz);
    ASSERT_EQ(std::memcmp(shared.data<float>(), alone.data<float>(), alone.nbytes()), 0)
        << "repeat " << r;
  }
  stop.store(true);
  helper.join();
  EXPECT_GT(helped.load(), 0) << "the helping thread never ran a block";
}

// With sharing off (the default on AMD CPUs) the owner runs every block itself, in the same
// split: a thread helping on the board never gets one, and the bytes are those of shared blocks.
TEST(WeightGradientBlocks, UnsharedBlocksStayWithTheirOwner) {
  const BlockingGuard guard({.macs_per_block = 1, .min_rows = 16});
  const Tensor x = random_tensor({64, 256}, 23), dz = random_tensor({64, 48}, 24);
  ASSERT_EQ(ops::weight_gradient_blocks(256, 48, 64).blocks, 8);
  Tensor shared;
  {
    const SharingGuard sharing(true);
    shared = weight_gradient(x, dz);
  }
  const SharingGuard sharing(false);
  EXPECT_FALSE(ops::share_weight_gradient_blocks());
  BlockBoard board;
  std::atomic<bool> stop{false};
  std::atomic<int> helped{0}, looked{0};
  std::thread helper([&] {
    while (!stop.load()) {
      if (board.help()) helped.fetch_add(1);
      looked.fetch_add(1);
    }
  });
  // Until the helper has looked at the board many times while the products ran.
  for (int r = 0; r < 50 || (looked.load() < 1000 && r < 200000); ++r) {
    const BlockBoardScope scope(&board);
    const Tensor own = weight_gradient(x, dz);
    ASSERT_EQ(std::memcmp(own.data<float>(), shared.data<float>(), shared.nbytes()), 0)
        << "repeat " << r;
  }
  stop.store(true);
  helper.join();
  EXPECT_EQ(helped.load(), 0) << "a helping thread ran a block with sharing off";
}

}  // namespace
}  // namespace lockstep
