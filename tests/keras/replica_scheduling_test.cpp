// A replica is a shard of the global batch, not a thread: for a given number of replicas N the
// weights fit reaches are bit-identical on any number of worker threads T (more threads than
// cores included), and a thread held mid-step (a test hook, not a sleep) does not hold the step —
// a backup run on another thread finishes its task with the same bits.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "distribute/step/replica_runs.h"
#include "distribute/step/replicated_step.h"
#include "distribute/step/task_pool.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/keras.h"
#include "lockstep/ops/matmul.h"
#include "testing/bf16_matmul_mode.h"
#include "testing/classification_data.h"
#include "testing/policy_guard.h"
#include "testing/setting_guard.h"
#include "testing/transposed_input_copies.h"

namespace lockstep::keras {
namespace {

constexpr int64_t kInputs = 12, kHidden = 9, kClasses = 4;
constexpr int64_t kExamples = 3 * 29 + 11;  // global batches of 29: the last one holds 11
constexpr int64_t kGlobalBatch = 29;        // divides by none of 2, 3, 4, 8

Sequential small_mlp() {
  return Sequential({Input({kInputs}), layers::Dense({.units = kHidden, .activation = "relu"}),
                     layers::Dense({.units = kClasses, .activation = "softmax"})});
}

distribute::StrategyConfig config(int replicas, int threads) {
  distribute::StrategyConfig c;
  c.name = "Test";
  c.replica_cores.assign(static_cast<size_t>(replicas), {});
  c.num_threads = threads;
  return c;
}

std::vector<Tensor> initial_weights() {
  std::mt19937_64 rng(41);
  return {testing::uniform_tensor(rng, {kInputs, kHidden}, 0.5f),
          testing::uniform_tensor(rng, {kHidden}, 0.1f),
          testing::uniform_tensor(rng, {kHidden, kClasses}, 0.5f),
          testing::uniform_tensor(rng, {kClasses}, 0.1f)};
}

std::string bytes_of(const std::vector<Variable>& vars) {
  std::string out;
  for (const Variable& v : vars) {
    const Tensor& t = v.raw_value();
    out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  }
  return out;
}

// Fits 3 epochs of Adam on `strategy` from fixed weights and returns the weights' bytes; `setup`
// may install hooks (run before fit, with the model's callbacks list to extend).
// `first_kernel_paired`: set to whether the first kernel's bfloat16 copy ended in pairs of rows.
std::string fit_bytes(distribute::Strategy& strategy,
                      std::vector<std::shared_ptr<callbacks::Callback>> cbs = {},
                      distribute::SyncStats* stats = nullptr, bool* first_kernel_paired = nullptr) {
  testing::ClassificationData data =
      testing::random_classification(kExamples, kInputs, kClasses, 5);
  Dataset ds = Dataset::from_tensor_slices({data.x, data.y}).batch(kGlobalBatch);
  std::vector<Tensor> init = initial_weights();
  auto scope = strategy.scope();
  Sequential model = small_mlp();
  std::vector<Variable> ws = model.weights();
  for (size_t i = 0; i < ws.size(); ++i) ws[i].assign(init[i]);
  model.compile({.optimizer = optimizers::Adam({.learning_rate = 0.01}),
                 .loss = losses::CategoricalCrossentropy(),
                 .metrics = {metrics::CategoricalAccuracy()}});
  model.fit(ds, {.epochs = 3, .verbose = 0, .callbacks = cbs});
  EXPECT_EQ(model.optimizer().iterations(), 3 * 4);
  if (stats != nullptr) *stats = model.gradient_sync_stats();
  if (first_kernel_paired != nullptr)
    *first_kernel_paired = mixed_precision::rounded_weights_out(ws[0]).layout != nullptr;
  return bytes_of(ws);
}

// Sets how the step's update writes (in place or out of place) for a test's duration.
class InPlaceGuard : public lockstep::testing::SettingGuard<distribute::BufferedUpdate::InPlace> {
 public:
  explicit InPlaceGuard(distribute::BufferedUpdate::InPlace mode)
      : SettingGuard(distribute::BufferedUpdate::in_place_mode,
                     distribute::BufferedUpdate::set_in_place, mode) {}
};

TEST(ReplicaScheduling, WeightsAreBitIdenticalOnAnyNumberOfThreads) {
  const std::string initial = [] {
    std::string out;
    for (const Tensor& t : initial_weights())
      out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
    return out;
  }();
  for (int n : {1, 2, 3, 4, 8}) {
    distribute::Strategy reference_strategy(config(n, 1));
    const std::string reference = fit_bytes(reference_strategy);
    ASSERT_EQ(reference.size(), initial.size());
    EXPECT_NE(reference, initial) << "the weights moved";
    std::vector<int> threads = {2, 3};
    if (n > 3) threads.push_back(n);
    for (int t : threads) {
      distribute::Strategy strategy(config(n, t));
      ASSERT_EQ(strategy.num_threads(), t);
      EXPECT_TRUE(fit_bytes(strategy) == reference)
          << n << " replicas on " << t << " threads differ from 1 thread";
    }
  }
}

// The same under mixed_bfloat16: bfloat16 activations and rounded weights, with oneDNN's bfloat16
// kernels where the CPU has them and float32 kernels on bfloat16-rounded values where it has none
// (the isa label runs this under LOCKSTEP_MAX_CPU_ISA=AVX2 and SSE41 too).
TEST(ReplicaScheduling, MixedBfloat16WeightsAreBitIdenticalOnAnyNumberOfThreads) {
  lockstep::testing::PolicyGuard policy("mixed_bfloat16");
  for (int n : {1, 3, 4}) {
    distribute::Strategy reference_strategy(config(n, 1));
    const std::string reference = fit_bytes(reference_strategy);
    for (int t : {2, 3}) {
      distribute::Strategy strategy(config(n, t));
      EXPECT_TRUE(fit_bytes(strategy) == reference)
          << n << " replicas on " << t << " threads differ from 1 thread under mixed_bfloat16";
    }
  }
}

// Under mixed_bfloat16 a Dense kernel's gradient is its bfloat16 values' (rounded to bfloat16):
// kept as bfloat16 in the replicas' buffers, the update reads half the bytes. Widened into float32
// buffers instead, the sums are the same: the same bytes, on one thread and several.
TEST(ReplicaScheduling, MixedBfloat16GradientBuffersGiveTheBitsOfFloat32Ones) {
  lockstep::testing::PolicyGuard policy("mixed_bfloat16");
  struct BuffersGuard {
    ~BuffersGuard() { distribute::ReplicaRuns::set_bfloat16_gradient_buffers(true); }
  } restore;
  for (int n : {2, 3}) {
    distribute::ReplicaRuns::set_bfloat16_gradient_buffers(false);
    distribute::Strategy reference_strategy(config(n, 1));
    distribute::SyncStats stats;
    const std::string reference = fit_bytes(reference_strategy, {}, &stats);
    EXPECT_EQ(stats.bfloat16_gradient_chunks, 0u);
    distribute::ReplicaRuns::set_bfloat16_gradient_buffers(true);
    for (int t : {1, 2}) {
      distribute::Strategy strategy(config(n, t));
      EXPECT_TRUE(fit_bytes(strategy, {}, &stats) == reference)
          << n << " replicas on " << t << " threads: bfloat16 gradient buffers changed the bytes";
      // Both kernels (one chunk each) read as bfloat16 in each of the 12 steps.
      EXPECT_GE(stats.bfloat16_gradient_chunks, 2u * 12u) << n << " replicas";
    }
  }
}

// Under mixed_bfloat16 the first kernel (whose input needs no gradient) is multiplied in the
// layout oneDNN's bfloat16 kernel reads (pairs of rows, kept so by the optimizer's update): the
// bytes of the plain copy, on one thread and several, in place and out of place. Where oneDNN has
// no bfloat16 kernels there is no such layout and both runs multiply the same way.
TEST(ReplicaScheduling, MixedBfloat16KernelsInPairsOfRowsGiveTheBitsOfPlainOnes) {
  lockstep::testing::PolicyGuard policy("mixed_bfloat16");
  const ops::Bf16MatmulMode saved_mode = ops::bf16_matmul_mode();
  ops::set_bf16_matmul_mode(ops::Bf16MatmulMode::bfloat16_kernels);
  struct Restore {
    ops::Bf16MatmulMode mode;
    ~Restore() {
      mixed_precision::set_paired_kernels(true);
      ops::set_bf16_matmul_mode(mode);
    }
  } restore{saved_mode};
  const bool expect_paired = ops::bf16_kernel_layout(kGlobalBatch / 2, kInputs, kHidden, true,
                                                     ops::FusedActivation::relu) != nullptr;
  for (auto in_place :
       {distribute::BufferedUpdate::InPlace::never, distribute::BufferedUpdate::InPlace::always}) {
    const InPlaceGuard guard(in_place);
    for (int n : {2, 3}) {
      mixed_precision::set_paired_kernels(false);
      distribute::Strategy reference_strategy(config(n, 1));
      bool paired = true;
      const std::string reference = fit_bytes(reference_strategy, {}, nullptr, &paired);
      EXPECT_FALSE(paired);
      mixed_precision::set_paired_kernels(true);
      for (int t : {1, 2}) {
        distribute::Strategy strategy(config(n, t));
        EXPECT_TRUE(fit_bytes(strategy, {}, nullptr, &paired) == reference)
            << n << " replicas on " << t << " threads: the paired kernel changed the bytes";
        EXPECT_EQ(paired, expect_paired) << n << " replicas on " << t << " threads";
      }
    }
  }
}

// Under mixed_bfloat16 a Rescaling of uint8 rows writes its output's transpose beside it in
// training, and the first kernel's gradient reads that dense copy instead of a strided view of the
// output (where oneDNN's bfloat16 kernels run): the bytes of the run without it, on one thread and
// several. A model with 40 inputs, so that the copy spans more than one of its 32 × 32 tiles.
TEST(ReplicaScheduling, MixedBfloat16TransposedInputCopiesGiveTheBitsOfStridedProducts) {
  lockstep::testing::PolicyGuard policy("mixed_bfloat16");
  lockstep::testing::Bf16MatmulModeGuard mode(ops::Bf16MatmulMode::bfloat16_kernels);
  constexpr int64_t kPixels = 40;
  std::mt19937_64 rng(17);
  Tensor x({kExamples, kPixels}, DType::uint8);
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  const Tensor y = testing::random_classification(kExamples, 1, kClasses, 6).y;
  auto fit = [&](distribute::Strategy& strategy) {
    Dataset ds = Dataset::from_tensor_slices({x, y}).batch(kGlobalBatch);
    auto scope = strategy.scope();
    Sequential model(
        {Input({kPixels}, DType::uint8), layers::Rescaling(1.0 / 255),
         layers::Dense({.units = kHidden, .activation = "relu"}),
         layers::Dense({.units = kClasses, .activation = "softmax", .dtype = "float32"})});
    std::mt19937_64 init(43);
    std::vector<Variable> ws = model.weights();
    ws[0].assign(testing::uniform_tensor(init, {kPixels, kHidden}, 0.5f));
    ws[2].assign(testing::uniform_tensor(init, {kHidden, kClasses}, 0.5f));
    model.compile({.optimizer = optimizers::Adam({.learning_rate = 0.01}),
                   .loss = losses::CategoricalCrossentropy()});
    model.fit(ds, {.epochs = 3, .verbose = 0});
    EXPECT_EQ(model.optimizer().iterations(), 3 * 4);
    return bytes_of(ws);
  };
  for (int n : {2, 3}) {
    std::string reference;
    {
      lockstep::testing::TransposedInputCopiesGuard copies(false);
      distribute::Strategy reference_strategy(config(n, 1));
      reference = fit(reference_strategy);
    }
    lockstep::testing::TransposedInputCopiesGuard copies(true);
    for (int t : {1, 2}) {
      distribute::Strategy strategy(config(n, t));
      EXPECT_TRUE(fit(strategy) == reference)
          << n << " replicas on " << t << " threads: the transposed input copy changed the bytes";
    }
  }
}

// The weight gradients split into blocks of rows that a thread done with its replica takes from
// one still running (ops::weight_gradient_blocks, forced down to this model's size), or that each
// replica's thread runs itself (sharing off, the default on AMD CPUs): the same bytes on any
// number of threads, and the same with sharing on or off.
TEST(ReplicaScheduling, SharedWeightGradientBlocksKeepTheWeightsBitIdentical) {
  const ops::WeightGradientBlocking saved = ops::weight_gradient_blocking();
  const bool saved_sharing = ops::share_weight_gradient_blocks();
  ops::set_weight_gradient_blocking({.macs_per_block = 1, .min_rows = 2});
  ASSERT_EQ(ops::weight_gradient_blocks(kInputs, kHidden, 8).blocks, 6);
  for (int n : {2, 3}) {
    ops::set_share_weight_gradient_blocks(true);
    distribute::Strategy reference_strategy(config(n, 1));
    const std::string reference = fit_bytes(reference_strategy);
    for (bool sharing : {true, false}) {
      ops::set_share_weight_gradient_blocks(sharing);
      for (int t : {2, 3}) {
        distribute::Strategy strategy(config(n, t));
        EXPECT_TRUE(fit_bytes(strategy) == reference)
            << n << " replicas on " << t << " threads differ from 1 thread with blocks "
            << (sharing ? "shared" : "unshared");
      }
    }
  }
  ops::set_share_weight_gradient_blocks(saved_sharing);
  ops::set_weight_gradient_blocking(saved);
}

// The update in place (whatever the machine's load) gives the bytes of the update out of place,
// on any number of threads, in float32 and mixed_bfloat16. Every step whose replicas' phase had no
// backup updates in place, so the steps that did not are at most the backup runs.
TEST(ReplicaScheduling, UpdatesInPlaceGiveTheBitsOfUpdatesOutOfPlace) {
  for (const char* policy : {"float32", "mixed_bfloat16"}) {
    lockstep::testing::PolicyGuard guard(policy);
    for (int n : {2, 3}) {
      std::string reference;
      {
        const InPlaceGuard out_of_place(distribute::BufferedUpdate::InPlace::never);
        distribute::Strategy reference_strategy(config(n, 1));
        distribute::SyncStats stats;
        reference = fit_bytes(reference_strategy, {}, &stats);
        EXPECT_EQ(stats.in_place_updates, 0u);
      }
      const InPlaceGuard in_place(distribute::BufferedUpdate::InPlace::always);
      for (int t : {1, 2, 3}) {
        distribute::Strategy strategy(config(n, t));
        distribute::SyncStats stats;
        EXPECT_TRUE(fit_bytes(strategy, {}, &stats) == reference)
            << policy << ": " << n << " replicas on " << t << " threads, in place";
        EXPECT_LE(stats.in_place_updates, 12u);
        EXPECT_GE(stats.in_place_updates + stats.backup_runs, 12u)
            << policy << ": " << n << " replicas on " << t << " threads";
      }
    }
  }
}

// A model's update written with non-temporal stores (the path of models larger than the caches,
// forced here by a zero threshold) gives the bytes ordinary stores give, on 1 and 3 threads.
TEST(ReplicaScheduling, StreamedUpdateWritesTheSameBits) {
  const size_t saved = distribute::BufferedUpdate::streaming_threshold();
  std::string reference, streamed_one, streamed_three;
  distribute::BufferedUpdate::set_streaming_threshold(SIZE_MAX);
  {
    distribute::Strategy strategy(config(3, 3));
    reference = fit_bytes(strategy);
  }
  distribute::BufferedUpdate::set_streaming_threshold(0);
  {
    distribute::Strategy strategy(config(3, 1));
    streamed_one = fit_bytes(strategy);
  }
  {
    distribute::Strategy strategy(config(3, 3));
    streamed_three = fit_bytes(strategy);
  }
  distribute::BufferedUpdate::set_streaming_threshold(saved);
  EXPECT_TRUE(streamed_one == reference);
  EXPECT_TRUE(streamed_three == reference);
}

// Holds the first task of the given kind (0: a replica's forward and backward, 1: a block of the
// update) that a helper thread takes from the given step on, until the step's batch has ended
// (on_train_batch_end): the step can only end through a backup run. The held run then goes on
// after its step has ended: it has lost, and nothing it computes may reach the weights or the
// optimizer's slots.
class StallOneThread : public callbacks::Callback {
 public:
  StallOneThread(distribute::TaskPool& pool, int from_step, int task_kind = 0)
      : pool_(pool), from_step_(from_step) {
    pool_.set_run_hook([this, task_kind](int kind, int, int thread, bool backup, uint64_t phase) {
      std::unique_lock lock(mu_);
      // Only a run of the current step's phases: a thread that reaches a task of an earlier step
      // late (its phase finished by a backup) must not be held, or the next step, which waits for
      // such runs before its update, would wait for the release at its own end.
      if (kind != task_kind || backup || stalled_ || step_ < from_step_ ||
          phase < step_first_phase_)
        return;
      if (thread == 0) {
        // The calling thread waits until a helper holds a task of this kind and step, so that
        // one is held whatever the order in which the threads woke up.
        cv_.wait(lock, [this] { return stalled_; });
        return;
      }
      stalled_ = true;
      stalled_at_step_ = step_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return released_; });
    });
  }
  ~StallOneThread() override { pool_.set_run_hook({}); }
  void on_train_batch_begin(int64_t batch, const callbacks::Logs&) override {
    std::lock_guard lock(mu_);
    step_ = batch;
    step_first_phase_ = pool_.stats().phases + 1;  // read on the thread that runs the phases
  }
  void on_train_batch_end(int64_t, const callbacks::Logs&) override {
    std::lock_guard lock(mu_);
    if (stalled_ && !released_) {
      released_ = true;
      released_after_step_ = step_;
      cv_.notify_all();
    }
  }
  bool stalled() {
    std::lock_guard lock(mu_);
    return stalled_;
  }
  int64_t stalled_at_step() {
    std::lock_guard lock(mu_);
    return stalled_at_step_;
  }
  int64_t released_after_step() {
    std::lock_guard lock(mu_);
    return released_after_step_;
  }

 private:
  distribute::TaskPool& pool_;
  int from_step_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t step_ = -1, stalled_at_step_ = -1, released_after_step_ = -1;
  uint64_t step_first_phase_ = 0;
  bool stalled_ = false, released_ = false;
};

TEST(ReplicaScheduling, AStalledThreadDoesNotHoldTheStepAndTheBitsDoNotChange) {
  for (int n : {2, 4}) {
    distribute::Strategy reference_strategy(config(n, 1));
    const std::string reference = fit_bytes(reference_strategy);

    distribute::Strategy strategy(config(n, 2));
    auto stall = std::make_shared<StallOneThread>(strategy.task_pool(), /*from_step=*/1);
    const std::string got = fit_bytes(strategy, {stall});
    ASSERT_TRUE(stall->stalled()) << "the helper thread never took a replica task";
    // The step it was held in ended while it was held: its task was finished by the backup.
    EXPECT_EQ(stall->released_after_step(), stall->stalled_at_step());
    EXPECT_GE(strategy.task_pool().stats().backup_wins, 1u);
    EXPECT_TRUE(got == reference) << n << " replicas: a backup run changed the weights";
  }
}

// A step whose replica was backed up (a thread held in a replica's run) updates out of place: the
// losing run may still read the weights. The bytes do not change.
TEST(ReplicaScheduling, AStepWithABackedUpReplicaUpdatesOutOfPlace) {
  const InPlaceGuard in_place(distribute::BufferedUpdate::InPlace::always);
  distribute::Strategy reference_strategy(config(2, 1));
  const std::string reference = fit_bytes(reference_strategy);
  distribute::Strategy strategy(config(2, 2));
  auto stall = std::make_shared<StallOneThread>(strategy.task_pool(), /*from_step=*/1);
  distribute::SyncStats stats;
  const std::string got = fit_bytes(strategy, {stall}, &stats);
  ASSERT_TRUE(stall->stalled()) << "the helper thread never took a replica task";
  EXPECT_GE(strategy.task_pool().stats().backup_wins, 1u);
  EXPECT_LT(stats.in_place_updates, 12u) << "the step with the backup updated in place";
  EXPECT_TRUE(got == reference) << "a step with a backed-up replica changed the weights";
}

TEST(ReplicaScheduling, AStalledUpdateBlockIsBackedUpAndItsLateRunChangesNothing) {
  // Out of place: the update's chunks have backups only there.
  const InPlaceGuard out_of_place(distribute::BufferedUpdate::InPlace::never);
  for (int n : {2, 3}) {
    distribute::Strategy reference_strategy(config(n, 1));
    const std::string reference = fit_bytes(reference_strategy);

    distribute::Strategy strategy(config(n, 2));
    auto stall = std::make_shared<StallOneThread>(strategy.task_pool(), /*from_step=*/1,
                                                  /*task_kind=*/1);
    distribute::SyncStats stats;
    const std::string got = fit_bytes(strategy, {stall}, &stats);
    ASSERT_TRUE(stall->stalled()) << "the helper thread never took a block of the update";
    EXPECT_EQ(stall->released_after_step(), stall->stalled_at_step());
    EXPECT_GE(strategy.task_pool().stats().backup_wins, 1u);
    // The held run is the block's first run, which writes the next buffers directly: the backup's
    // result went through the step's spare buffers, and the late first run wrote into the storage
    // those buffers gave up.
    EXPECT_GE(stats.backup_publishes, 1u);
    EXPECT_TRUE(got == reference) << n << " replicas: a late run of an update block changed the "
                                  << "weights or the optimizer's slots";
  }
}

// The same under mixed_bfloat16, where a block's first run also writes the weights' bfloat16
// copy straight to its next buffer: the backup's copy goes through a spare the optimizer swaps in
// (distribute::ElementwiseUpdate::swap_rounded_output). The later steps multiply by that copy, so
// a wrong or stale chunk of it would change the weights at the end.
TEST(ReplicaScheduling, AStalledUpdateBlockUnderMixedBfloat16PublishesTheBfloat16Copy) {
  lockstep::testing::PolicyGuard policy("mixed_bfloat16");
  const InPlaceGuard out_of_place(distribute::BufferedUpdate::InPlace::never);
  distribute::Strategy reference_strategy(config(2, 1));
  const std::string reference = fit_bytes(reference_strategy);

  distribute::Strategy strategy(config(2, 2));
  auto stall = std::make_shared<StallOneThread>(strategy.task_pool(), /*from_step=*/1,
                                                /*task_kind=*/1);
  distribute::SyncStats stats;
  const std::string got = fit_bytes(strategy, {stall}, &stats);
  ASSERT_TRUE(stall->stalled()) << "the helper thread never took a block of the update";
  EXPECT_GE(strategy.task_pool().stats().backup_wins, 1u);
  EXPECT_GE(stats.backup_publishes, 1u);
  EXPECT_TRUE(got == reference) << "a backup's block of the update under mixed_bfloat16 changed "
                                << "the weights";
}

}  // namespace
}  // namespace lockstep::keras
