// ReplicaRuns against fake replica functions: every replica commits one run with its gradients and
// state; a run held on its thread loses to its backup, whose result commits while per-replica state
// changes once; a replica function that calls a collective switches the replicas to a gang.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "distribute/step/replica_runs.h"
#include "distribute/step/task_pool.h"
#include "step_fakes.h"

namespace lockstep::distribute {
namespace {

using testing::gradient_value;
using testing::make_strategy;
using testing::make_variables;

struct FakeState : RunState {
  bool backup = false;
};

// Each replica's gradient from gradient_value(replica, ...), written into the run's buffers; the
// run's state says whether it was a backup; counters[replica] goes up by one per committed run.
ReplicaFn fake_replica(std::vector<int>& counters, std::mutex& mu) {
  return [&counters, &mu](ReplicaContext& ctx, ReplicaRun& run, const Element&) {
    const int r = ctx.local_replica_id();
    for (size_t v = 0; v < run.gradient_buffers().size(); ++v) {
      const Tensor& g = run.gradient_buffers()[v];
      for (int64_t j = 0; j < g.num_elements(); ++j) g.data<float>()[j] = gradient_value(r, v, j);
    }
    run.set_gradients(run.gradient_buffers());
    static_cast<FakeState*>(run.state())->backup = TaskPool::in_backup_run();
    ctx.replica_local(counters[static_cast<size_t>(r)], mu) += 1;
  };
}

void expect_gradients(const ReplicaRun& run, int replica, const std::vector<int64_t>& sizes) {
  const float* flat = run.flat_gradients();
  for (size_t v = 0; v < sizes.size(); ++v) {
    ASSERT_TRUE(run.has_gradient(v));
    for (int64_t j = 0; j < sizes[v]; ++j, ++flat)
      ASSERT_EQ(*flat, gradient_value(replica, v, j)) << "replica " << replica << " var " << v;
  }
}

ReplicaRuns::Options fake_options() {
  return {.make_state = [] { return std::make_unique<FakeState>(); }};
}

TEST(ReplicaRuns, EveryReplicaCommitsOneRunWithItsGradientsOnAnyNumberOfThreads) {
  const std::vector<int64_t> sizes = {5, 13, 1};
  for (int threads : {1, 2, 3}) {
    auto strategy = make_strategy(3, threads);
    ReplicaRuns runs(*strategy, make_variables(sizes), fake_options());
    std::vector<int> counters(3, 0);
    std::mutex mu;
    for (int step = 1; step <= 3; ++step) {
      runs.begin_step({}, fake_replica(counters, mu));
      ASSERT_TRUE(runs.run_as_tasks(false));
      runs.retire_previous_step();
      ASSERT_EQ(runs.committed().size(), 3u);
      for (int r = 0; r < 3; ++r) {
        expect_gradients(*runs.committed()[static_cast<size_t>(r)], r, sizes);
        EXPECT_EQ(runs.committed()[static_cast<size_t>(r)]->replica(), r);
        EXPECT_EQ(counters[static_cast<size_t>(r)], step) << "per-replica state once per step";
      }
    }
  }
}

// The helper thread's first run is held in the pool's run hook until the phase is over; the
// caller backs the held replica up.
TEST(ReplicaRuns, ABackupRunWinsAndPerReplicaStateChangesOnce) {
  const std::vector<int64_t> sizes = {7, 300};
  auto strategy = make_strategy(2, 2);
  TaskPool& pool = strategy->task_pool();
  std::mutex hook_mu;
  std::condition_variable cv;
  int held = -1;
  bool released = false;
  pool.set_run_hook([&](int kind, int task, int thread, bool backup, uint64_t) {
    std::unique_lock lock(hook_mu);
    if (kind != 0 || backup) return;
    if (thread != 0 && held < 0) {
      held = task;
      cv.notify_all();
      cv.wait_for(lock, std::chrono::minutes(1), [&] { return released; });
    } else if (thread == 0 && held < 0) {
      cv.wait(lock, [&] { return held >= 0; });
    }
  });
  {
    ReplicaRuns runs(*strategy, make_variables(sizes), fake_options());
    std::vector<int> counters(2, 0);
    std::mutex mu;
    runs.begin_step({}, fake_replica(counters, mu));
    ASSERT_TRUE(runs.run_as_tasks(false));
    {
      std::lock_guard lock(hook_mu);
      ASSERT_GE(held, 0);
      EXPECT_TRUE(static_cast<FakeState*>(runs.committed_state(held))->backup)
          << "the held replica was committed by its backup";
      released = true;
      cv.notify_all();
    }
    for (int r = 0; r < 2; ++r)
      expect_gradients(*runs.committed()[static_cast<size_t>(r)], r, sizes);
    EXPECT_EQ(counters, std::vector<int>({1, 1}));
    runs.settle();  // the held run, released, is discarded
    EXPECT_EQ(counters, std::vector<int>({1, 1})) << "the losing run changed no shared state";
    EXPECT_GE(pool.stats().backup_wins, 1u);
  }
  pool.set_run_hook({});
}

TEST(ReplicaRuns, AReplicaCallingACollectiveSwitchesToAGang) {
  const std::vector<int64_t> sizes = {4};
  auto strategy = make_strategy(2, 2);
  ReplicaRuns runs(*strategy, make_variables(sizes), fake_options());
  std::vector<int> counters(2, 0);
  std::mutex mu;
  ReplicaFn plain = fake_replica(counters, mu);
  ReplicaFn with_collective = [&plain](ReplicaContext& ctx, ReplicaRun& run, const Element& e) {
    Tensor one = Tensor::zeros({1}, DType::float32);
    one.data<float>()[0] = 1.0f;
    Tensor sum = ctx.all_reduce(ReduceOp::SUM, one);
    ASSERT_EQ(sum.data<float>()[0], 2.0f);
    plain(ctx, run, e);
  };
  runs.begin_step({}, with_collective);
  EXPECT_FALSE(runs.run_as_tasks(false));
  EXPECT_TRUE(runs.gang());
  runs.run_as_gang();
  for (int r = 0; r < 2; ++r) expect_gradients(*runs.committed()[static_cast<size_t>(r)], r, sizes);
  EXPECT_EQ(counters, std::vector<int>({1, 1}));
}

TEST(ReplicaRun, RejectsAGradientShapedUnlikeItsVariable) {
  auto strategy = make_strategy(1, 1);
  ReplicaRuns runs(*strategy, make_variables({3}), fake_options());
  ReplicaFn wrong = [](ReplicaContext&, ReplicaRun& run, const Element&) {
    run.set_gradients({Tensor::zeros({4}, DType::float32)});
  };
  runs.begin_step({}, wrong);
  EXPECT_THROW(runs.run_as_tasks(false), InvalidArgument);
}

}  // namespace
}  // namespace lockstep::distribute
