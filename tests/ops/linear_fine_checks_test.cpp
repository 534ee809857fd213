// A backup run computes linear's long float32 forward matmuls in row blocks, checking for
// cancellation between them, where the blocks give the bits of the whole call: its result must be
// the first run's, byte for byte, so that a backup that wins changes nothing.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <tuple>
#include <vector>

#include "lockstep/core/random.h"
#include "lockstep/core/task_cancellation.h"
#include "lockstep/ops/linear.h"
#include "ops/internal.h"

namespace lockstep {
namespace {

Tensor random_tensor(const Shape& shape, uint32_t seed) {
  return Generator(seed, /*stream=*/7).uniform(shape, -1.0, 1.0);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data<float>(), b.data<float>(),
                     static_cast<size_t>(a.num_elements()) * sizeof(float)) == 0;
}

// The seed model's first layer, a batch none of the blocks divides evenly, no bias, and a shape
// too small to be split: inside a run that wants fine checks the output is the same bytes.
TEST(LinearFineChecks, ABackupRunsForwardHasTheFirstRunsBits) {
  const std::vector<std::tuple<int64_t, int64_t, int64_t, bool, ops::FusedActivation>> cases = {
      {128, 784, 128, true, ops::FusedActivation::relu},
      {100, 300, 96, true, ops::FusedActivation::none},
      {256, 512, 64, false, ops::FusedActivation::relu},
      {8, 16, 4, true, ops::FusedActivation::relu},
  };
  uint32_t seed = 1;
  for (const auto& [m, k, n, with_bias, act] : cases) {
    const Tensor x = random_tensor({m, k}, seed++);
    const Tensor w = random_tensor({k, n}, seed++);
    const Tensor b = with_bias ? random_tensor({n}, seed++) : Tensor();
    const Tensor first = ops::linear_forward(x, w, b, act);
    std::atomic<uint32_t> done{0};
    Tensor backup;
    {
      TaskCancellationScope scope(&done, /*fine=*/true);
      ASSERT_TRUE(task_wants_fine_checks());
      backup = ops::linear_forward(x, w, b, act);
    }
    EXPECT_TRUE(same_bytes(first, backup)) << m << "x" << k << "x" << n;
  }
  EXPECT_FALSE(task_wants_fine_checks());
}

// Where the seed model's first layer is computed in blocks, a run whose twin has committed stops
// inside the matmul (before its first block); where it is not, the call runs to its end.
// Outside a run that wants fine checks it always runs to its end.
TEST(LinearFineChecks, ARunWhoseTwinCommittedStopsBetweenRowBlocks) {
  const Tensor x = random_tensor({128, 784}, 7), w = random_tensor({784, 128}, 8),
               b = random_tensor({128}, 9);
  std::atomic<uint32_t> done{1};
  {
    TaskCancellationScope scope(&done);  // a first run: no blocks
    EXPECT_NO_THROW(ops::linear_forward(x, w, b, ops::FusedActivation::relu));
  }
  TaskCancellationScope scope(&done, /*fine=*/true);
  if (ops::detail::row_blocks_give_the_same_bits(128, 784, 128, true)) {
    EXPECT_THROW(ops::linear_forward(x, w, b, ops::FusedActivation::relu), TaskCancelled);
  } else {
    EXPECT_NO_THROW(ops::linear_forward(x, w, b, ops::FusedActivation::relu));
  }
}

// The check of a shape's row blocks creates oneDNN primitives and runs the matmul twice: the first
// run of a task settles it, so that the backup run, there to end a step sooner, finds it made.
// Outside a task (no run to back up) a forward matmul does not make it.
TEST(LinearFineChecks, AFirstRunSettlesTheRowBlockCheckForItsBackups) {
  const int64_t m = 112, k = 700, n = 72;  // a shape no other test here uses
  const Tensor x = random_tensor({m, k}, 11), w = random_tensor({k, n}, 12),
               b = random_tensor({n}, 13);
  ASSERT_FALSE(ops::detail::row_blocks_checked(m, k, n, true));
  ops::linear_forward(x, w, b, ops::FusedActivation::relu);
  EXPECT_FALSE(ops::detail::row_blocks_checked(m, k, n, true));
  std::atomic<uint32_t> done{0};
  {
    TaskCancellationScope scope(&done);
    ops::linear_forward(x, w, b, ops::FusedActivation::relu);
  }
  EXPECT_TRUE(ops::detail::row_blocks_checked(m, k, n, true));
  EXPECT_FALSE(ops::detail::row_blocks_checked(m, k, n, false));
}

}  // namespace
}  // namespace lockstep
