#include "lockstep/distribute/strategy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "distribute/step/task_pool.h"
#include "lockstep/core/cpu_cores.h"
#include "lockstep/data/dataset.h"
#include "lockstep/distribute/distributed_dataset.h"
#include "lockstep/distribute/strategies.h"

namespace lockstep::distribute {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Values of each replica's slice, per step, for int64 scalar datasets batched.
std::vector<std::vector<std::vector<int64_t>>> rebatched(const Dataset& ds, int replicas) {
  MirroredStrategy strategy(replicas);
  auto dist = strategy.experimental_distribute_dataset(ds);
  auto it = dist.make_iterator();
  std::vector<std::vector<std::vector<int64_t>>> steps;
  while (auto step = it.next()) {
    std::vector<std::vector<int64_t>> per;
    for (const Element& e : step->values) per.push_back(e[0].to_vector<int64_t>());
    steps.push_back(per);
  }
  return steps;
}

TEST(DistributeDataset, SplitsGlobalBatchesAsTfDistributeDocuments) {
  using V = std::vector<int64_t>;
  // tf.distribute's examples: range(6).batch(4) on 2 replicas, range(4).batch(4) on 5 replicas.
  auto a = rebatched(Dataset::range(6).batch(4), 2);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_THAT(a[0], ElementsAre(V{0, 1}, V{2, 3}));
  EXPECT_THAT(a[1], ElementsAre(V{4}, V{5}));
  auto b = rebatched(Dataset::range(4).batch(4), 5);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_THAT(b[0], ElementsAre(V{0}, V{1}, V{2}, V{3}, V{}));
  auto c = rebatched(Dataset::range(8).batch(4), 3);
  EXPECT_THAT(c[0], ElementsAre(V{0, 1}, V{2, 3}, V{}));
  EXPECT_THAT(c[1], ElementsAre(V{4, 5}, V{6, 7}, V{}));
}

TEST(DistributeDataset, SlicesAreViewsOfTheGlobalBatch) {
  MirroredStrategy strategy(2);
  Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
  auto dist = strategy.experimental_distribute_dataset(Dataset::from_tensor_slices(x).batch(4));
  auto it = dist.make_iterator();
  auto step = it.next();
  ASSERT_TRUE(step);
  EXPECT_TRUE((*step)[0][0].shares_storage_with((*step)[1][0]));
  EXPECT_EQ((*step)[1][0].to_vector<float>(), (std::vector<float>{4, 5, 6, 7}));
  EXPECT_EQ(it.last_global_batch_size(), 4);
}

TEST(DistributeDataset, FromFunctionGivesEachReplicaItsOwnBatch) {
  MirroredStrategy strategy(2);
  int calls = 0;
  auto dist = strategy.distribute_datasets_from_function([&](const InputContext& ctx) {
    ++calls;
    EXPECT_EQ(ctx.num_replicas_in_sync, 2);
    EXPECT_EQ(ctx.get_per_replica_batch_size(8), 4);
    return Dataset::range(10).batch(ctx.get_per_replica_batch_size(8));
  });
  EXPECT_EQ(calls, 1);
  auto it = dist.make_iterator();
  auto s0 = it.next(), s1 = it.next();
  ASSERT_TRUE(s0 && s1);
  EXPECT_EQ((*s0)[1][0].to_vector<int64_t>(), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ((*s1)[0][0].to_vector<int64_t>(), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ((*s1)[1][0].num_elements(), 0);  // the dataset ended inside the step
  EXPECT_FALSE(it.next());
}

TEST(DistributeDataset, PerReplicaModeBuildsOnePipelinePerReplica) {
  MirroredStrategy strategy(3);
  std::vector<int> ids;
  auto dist = strategy.distribute_datasets_from_function(
      [&](const InputContext& ctx) {
        ids.push_back(ctx.input_pipeline_id);
        EXPECT_EQ(ctx.num_input_pipelines, 3);
        EXPECT_EQ(ctx.num_replicas_in_sync, 3);
        // Replica i: 10 * i, 10 * i + 1, ... with i + 1 elements, in batches of 2.
        return Dataset::range(10 * ctx.input_pipeline_id,
                              10 * ctx.input_pipeline_id + 1 + ctx.input_pipeline_id)
            .batch(2);
      },
      {.experimental_replication_mode = InputReplicationMode::PER_REPLICA});
  EXPECT_EQ(ids, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(dist.num_local_replicas(), 3);
  EXPECT_EQ(dist.cardinality(), 2);  // the longest pipeline: 3 elements in batches of 2
  auto it = dist.make_iterator();
  EXPECT_FALSE(it.fetches_on_replicas());  // finite: the host pulls, to see the end coming
  auto s0 = it.next();
  ASSERT_TRUE(s0);
  EXPECT_EQ((*s0)[0][0].to_vector<int64_t>(), (std::vector<int64_t>{0}));
  EXPECT_EQ((*s0)[1][0].to_vector<int64_t>(), (std::vector<int64_t>{10, 11}));
  EXPECT_EQ((*s0)[2][0].to_vector<int64_t>(), (std::vector<int64_t>{20, 21}));
  EXPECT_EQ(it.last_global_batch_size(), 5);
  auto s1 = it.next();
  ASSERT_TRUE(s1);
  // Replicas 0 and 1 ran out: empty batches shaped like replica 2's.
  EXPECT_EQ((*s1)[0][0].num_elements(), 0);
  EXPECT_EQ((*s1)[1][0].num_elements(), 0);
  EXPECT_EQ((*s1)[2][0].to_vector<int64_t>(), (std::vector<int64_t>{22}));
  EXPECT_EQ(it.last_global_batch_size(), 1);
  EXPECT_EQ(it.state().position, 2);  // the furthest pipeline
  EXPECT_FALSE(it.next());
  EXPECT_THROW(it.next_on_replica(2), OutOfRange);
  EXPECT_THROW(it.next_on_replica(3), InvalidArgument);
}

// Per-replica pipelines of range(100), replica i taking every n-th number from i, endlessly, in
// batches of 3.
DistributedDataset sharded_range_per_replica(Strategy& strategy) {
  return strategy.distribute_datasets_from_function(
      [](const InputContext& ctx) {
        return Dataset::range(100)
            .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            .repeat()
            .batch(3);
      },
      {.experimental_replication_mode = InputReplicationMode::PER_REPLICA});
}

TEST(DistributeDataset, InfinitePerReplicaPipelinesArePulledByTheirReplicas) {
  MirroredStrategy strategy(2);
  auto dist = sharded_range_per_replica(strategy);
  EXPECT_EQ(dist.cardinality(), Dataset::kInfinite);
  auto it = dist.make_iterator();
  ASSERT_TRUE(it.fetches_on_replicas());
  EXPECT_EQ(it.next_on_replica(1)[0].to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 5}));
  EXPECT_EQ(it.next_on_replica(0)[0].to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(it.next_on_replica(0)[0].to_vector<int64_t>(), (std::vector<int64_t>{6, 8, 10}));
  // Not a per-replica dataset: no per-replica pulls.
  auto global = strategy.experimental_distribute_dataset(Dataset::range(4).repeat().batch(2));
  auto git = global.make_iterator();
  EXPECT_FALSE(git.fetches_on_replicas());
  EXPECT_THROW(git.next_on_replica(0), InvalidArgument);
}

// What an idle thread pulls ahead (stage_next) is what the replica's next pull gets, in the same
// order as without staging; the iterator's state does not count it (a resume pulls it again), and
// the error of a staged pull is thrown by the replica's pull it was staged for.
TEST(DistributeDataset, StagedElementsArePulledInOrderAndNotCountedInTheState) {
  MirroredStrategy strategy(2);
  auto dist = sharded_range_per_replica(strategy);
  auto it = dist.make_iterator();
  ASSERT_TRUE(it.fetches_on_replicas());
  EXPECT_TRUE(it.stage_next());  // replica 0's first batch, before its first pull
  EXPECT_EQ(it.next_on_replica(0)[0].to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(it.next_on_replica(1)[0].to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 5}));
  const IteratorState before = it.state();  // one step
  EXPECT_EQ(before.position, 1);
  EXPECT_TRUE(it.stage_next(1));   // replica 1's second batch, as asked
  EXPECT_TRUE(it.stage_next(1));   // replica 0's: 1 has one
  EXPECT_FALSE(it.stage_next(0));  // each replica has one staged
  EXPECT_EQ(it.state(), before);
  // A resume from the state pulls the staged batches again.
  auto resumed = dist.make_iterator(it.state());
  EXPECT_EQ(resumed.next_on_replica(0)[0].to_vector<int64_t>(), (std::vector<int64_t>{6, 8, 10}));
  EXPECT_EQ(resumed.next_on_replica(1)[0].to_vector<int64_t>(), (std::vector<int64_t>{7, 9, 11}));

  EXPECT_EQ(it.next_on_replica(1)[0].to_vector<int64_t>(), (std::vector<int64_t>{7, 9, 11}));
  EXPECT_EQ(it.next_on_replica(0)[0].to_vector<int64_t>(), (std::vector<int64_t>{6, 8, 10}));
  EXPECT_EQ(it.next_on_replica(0)[0].to_vector<int64_t>(), (std::vector<int64_t>{12, 14, 16}));
  EXPECT_TRUE(it.stage_next());  // replica 0 again: it has none staged
  EXPECT_EQ(it.next_on_replica(0)[0].to_vector<int64_t>(), (std::vector<int64_t>{18, 20, 22}));
  EXPECT_EQ(it.next_on_replica(1)[0].to_vector<int64_t>(), (std::vector<int64_t>{13, 15, 17}));

  auto failing = strategy.distribute_datasets_from_function(
      [](const InputContext& ctx) {
        return Dataset::range(10)
            .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            .map([](const Element& e) {
              if (e[0].to_vector<int64_t>()[0] == 2) throw InvalidArgument("bad element 2");
              return e;
            })
            .repeat();
      },
      {.experimental_replication_mode = InputReplicationMode::PER_REPLICA});
  auto fit = failing.make_iterator();
  ASSERT_TRUE(fit.fetches_on_replicas());
  EXPECT_EQ(fit.next_on_replica(0)[0].to_vector<int64_t>(), (std::vector<int64_t>{0}));
  EXPECT_TRUE(fit.stage_next());  // replica 0's element 2: its map throws
  EXPECT_THROW(fit.next_on_replica(0), InvalidArgument);
  // Not per-replica pipelines: nothing to stage.
  auto global = strategy.experimental_distribute_dataset(Dataset::range(4).repeat().batch(2));
  auto git = global.make_iterator();
  EXPECT_FALSE(git.stage_next());
}

TEST(Strategy, RunGivesEveryReplicaItsIdAndReduceCombinesThem) {
  MirroredStrategy strategy(3);
  EXPECT_EQ(strategy.num_replicas_in_sync(), 3);
  auto values = strategy.run([](ReplicaContext& ctx) {
    EXPECT_EQ(get_replica_context(), &ctx);
    double id = ctx.replica_id_in_sync_group();
    return Tensor::from_vector<float>({static_cast<float>(id), 1.0f}, {2});
  });
  EXPECT_EQ(strategy.reduce(ReduceOp::SUM, values).to_vector<float>(), (std::vector<float>{3, 3}));
  EXPECT_EQ(strategy.reduce(ReduceOp::MEAN, values).to_vector<float>(), (std::vector<float>{1, 1}));
  EXPECT_EQ(strategy.reduce(ReduceOp::MAX, values).to_vector<float>(), (std::vector<float>{2, 1}));
  EXPECT_EQ(get_replica_context(), nullptr);
}

TEST(Strategy, ReduceMeanAlongAxisWeighsUnevenBatchesByExample) {
  MirroredStrategy strategy(2);
  PerReplica<Tensor> v{
      {Tensor::from_vector<float>({1, 2, 3}, {3}), Tensor::from_vector<float>({10}, {1})}};
  EXPECT_DOUBLE_EQ(strategy.reduce(ReduceOp::MEAN, v, 0).item(), 4.0);
  EXPECT_DOUBLE_EQ(strategy.reduce(ReduceOp::SUM, v, 0).item(), 16.0);
  EXPECT_EQ(strategy.gather(v).to_vector<float>(), (std::vector<float>{1, 2, 3, 10}));
}

TEST(Strategy, ReplicaAllReduceSumsOverReplicas) {
  MirroredStrategy strategy(4);
  auto sums = strategy.run([](ReplicaContext& ctx) {
    Tensor t = Tensor::full({5}, ctx.replica_id_in_sync_group() + 1.0);
    return ctx.all_reduce(ReduceOp::SUM, t);
  });
  for (const Tensor& s : sums.values) EXPECT_EQ(s.to_vector<float>(), std::vector<float>(5, 10.0f));
}

TEST(Strategy, AFailingReplicaIsReportedAndDoesNotHangTheOthers) {
  MirroredStrategy strategy(3);
  try {
    strategy.run([](ReplicaContext& ctx) {
      if (ctx.local_replica_id() == 1) throw InvalidArgument("bad batch on replica 1");
      ctx.barrier();  // the others wait here for replica 1, which never comes
    });
    FAIL() << "expected the replica's error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("bad batch on replica 1"));
  }
  // The strategy is usable again afterwards.
  auto ids = strategy.run([](ReplicaContext& ctx) {
    ctx.barrier();
    return ctx.local_replica_id();
  });
  EXPECT_THAT(ids.values, ElementsAre(0, 1, 2));
}

TEST(Strategy, ScopeMakesItCurrentAndOwnsVariablesCreatedInside) {
  MirroredStrategy strategy(2);
  EXPECT_FALSE(has_strategy());
  EXPECT_EQ(&get_strategy(), &default_strategy());
  {
    auto scope = strategy.scope();
    EXPECT_EQ(&get_strategy(), &strategy);
    Variable v(Tensor::zeros({2}), "v");
    EXPECT_EQ(v.owner(), &strategy);
    MirroredStrategy other(1);
    try {
      auto inner = other.scope();
      FAIL() << "entering another strategy's scope must fail";
    } catch (const FailedPrecondition& e) {
      EXPECT_THAT(e.what(), HasSubstr("different strategy"));
    }
  }
  EXPECT_EQ(&get_strategy(), &default_strategy());
  EXPECT_EQ(default_strategy().num_replicas_in_sync(), 1);
}

TEST(Strategy, AbsentAcceleratorKindFallsBackToTheDefaultStrategy) {
  // The seed program's flow: try the accelerator resolver, fall back on NotFound.
  Strategy* strategy = nullptr;
  std::unique_ptr<Strategy> owned;
  try {
    AcceleratorClusterResolver resolver(AcceleratorOptions{.kind = "tpu"});
    owned = std::make_unique<AcceleratorStrategy>(resolver);
    strategy = owned.get();
  } catch (const NotFound& e) {
    EXPECT_THAT(e.what(), HasSubstr("tpu"));
    strategy = &get_strategy();
  }
  ASSERT_NE(strategy, nullptr);
  EXPECT_EQ(owned, nullptr);
  EXPECT_EQ(strategy->num_replicas_in_sync(), 1);
}

}  // namespace
}  // namespace lockstep::distribute

namespace lockstep::distribute {
namespace {

TEST(OneDeviceStrategy, ParsesDeviceNamesAndRejectsOthers) {
  EXPECT_EQ(OneDeviceStrategy("/cpu:0").num_replicas_in_sync(), 1);
  EXPECT_EQ(OneDeviceStrategy("/job:worker/task:0/device:cpu:0").device_names().size(), 1u);
  EXPECT_THROW(OneDeviceStrategy("/gpu:0"), InvalidArgument);
  EXPECT_THROW(OneDeviceStrategy("cpu:"), InvalidArgument);
  try {
    OneDeviceStrategy("cpu:4096");
    FAIL() << "expected NotFound";
  } catch (const NotFound& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("cpu:4096"));
  }
}

// A task pool with a thread for every core gets one more for busy machines, and its caller backs
// tasks up at once there, unless other workers of the job share the host: then the ranks' own
// threads are what keeps the cores busy.
TEST(Strategy, TheBusyMachineExtraThreadIsOnlyForAWorkerAloneOnItsHost) {
  const int cores = available_core_count();
  auto config = [&](bool shares) {
    StrategyConfig c;
    c.replica_cores.assign(static_cast<size_t>(cores), std::vector<int>{});
    c.num_threads = cores;
    c.shares_host_with_workers = shares;
    return c;
  };
  Strategy alone(config(false));
  EXPECT_EQ(alone.task_pool().total_threads(), cores + 1);
  EXPECT_TRUE(alone.task_pool().eager_caller_backups());
  Strategy shared(config(true));
  EXPECT_EQ(shared.task_pool().total_threads(), cores);
  EXPECT_FALSE(shared.task_pool().eager_caller_backups());
}

}  // namespace
}  // namespace lockstep::distribute
