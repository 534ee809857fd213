#include "lockstep/distribute/strategy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "lockstep/data/dataset.h"
#include "lockstep/distribute/distributed_dataset.h"
#include "lockstep/distribute/gradient_sync.h"
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

TEST(DistributeDataset, InfinitePerReplicaPipelinesArePulledByTheirReplicas) {
  MirroredStrategy strategy(2);
  auto dist = strategy.distribute_datasets_from_function(
      [](const InputContext& ctx) {
        return Dataset::range(100)
            .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            .repeat()
            .batch(3);
      },
      {.experimental_replication_mode = InputReplicationMode::PER_REPLICA});
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

TEST(GradientSynchronizer, SumsOverLocalReplicasAndCountsStepsAndBytes) {
  MirroredStrategy strategy(2);
  GradientSynchronizer sync({Shape{3}, Shape{2, 2}}, 2);
  EXPECT_EQ(sync.stats().steps, 0u);
  for (int step = 0; step < 3; ++step) {
    auto sums = strategy.run([&](ReplicaContext& ctx) {
      float v = static_cast<float>(ctx.local_replica_id() + 1);
      const std::vector<Tensor>& s =
          sync.all_reduce(ctx, {Tensor::full({3}, v), Tensor::full({2, 2}, v)});
      return s[1].reshape({4});
    });
    for (const Tensor& s : sums.values) EXPECT_EQ(s.to_vector<float>(), std::vector<float>(4, 3));
  }
  const SyncStats& stats = sync.stats();
  EXPECT_EQ(stats.steps, 3u);  // counted once per step (by local replica 0)
  EXPECT_EQ(stats.bytes_per_step, 7 * sizeof(float));
  EXPECT_GE(stats.local_seconds, 0.0);
  EXPECT_EQ(stats.cross_worker_seconds, 0.0);  // one worker
}

TEST(GradientSynchronizer, ReduceAndApplyHandsOutEveryPieceOfTheSameSumsOnce) {
  // Sizes that span several pieces of the fused loop; values whose float sums depend on the
  // order, so that "the same sums as all_reduce" is a real check.
  const int n = 3;
  const std::vector<Shape> shapes{Shape{40001}, Shape{3, 5}};
  const int64_t total = 40001 + 15;
  auto value = [](int r, int64_t i) {
    return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + r) * std::pow(10.0, r));
  };
  auto make = [&](int r, const Tensor& into0) {
    Tensor g0 = into0.defined() ? into0 : Tensor(shapes[0]);
    Tensor g1(shapes[1]);
    for (int64_t i = 0; i < 40001; ++i) g0.data<float>()[i] = value(r, i);
    for (int64_t i = 0; i < 15; ++i) g1.data<float>()[i] = value(r, 40001 + i);
    return std::vector<Tensor>{g0, g1};
  };
  MirroredStrategy strategy(n);
  GradientSynchronizer reference(shapes, n);
  Tensor expected({total});
  strategy.run([&](ReplicaContext& ctx) {
    const std::vector<Tensor>& s = reference.all_reduce(ctx, make(ctx.local_replica_id(), {}));
    if (ctx.local_replica_id() == 0) {
      std::memcpy(expected.data<float>(), s[0].data<float>(), 40001 * sizeof(float));
      std::memcpy(expected.data<float>() + 40001, s[1].data<float>(), 15 * sizeof(float));
    }
  });

  GradientSynchronizer sync(shapes, n);
  for (int step = 0; step < 2; ++step) {
    Tensor got = Tensor::full({total}, -1.0f);
    std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges(n);
    strategy.run([&](ReplicaContext& ctx) {
      int r = ctx.local_replica_id();
      // Gradient 0 computed in place in the synchroniser's buffer (no copy), gradient 1 not.
      std::vector<Tensor> grads = make(r, sync.gradient_buffers(r)[0]);
      sync.reduce_and_apply(
          ctx, grads, [&](const std::vector<Tensor>& sum, int64_t lo, int64_t hi) {
            ranges[static_cast<size_t>(r)].emplace_back(lo, hi);
            for (int64_t i = lo; i < hi; ++i) {
              got.data<float>()[i] =
                  i < 40001 ? sum[0].data<float>()[i] : sum[1].data<float>()[i - 40001];
            }
          });
    });
    EXPECT_EQ(got.to_vector<float>(), expected.to_vector<float>());
    // Every element in exactly one piece, handed to one replica; more than one piece per block.
    std::vector<std::pair<int64_t, int64_t>> all;
    for (const auto& rs : ranges) all.insert(all.end(), rs.begin(), rs.end());
    std::sort(all.begin(), all.end());
    EXPECT_GT(all.size(), static_cast<size_t>(n));
    int64_t at = 0;
    for (auto [lo, hi] : all) {
      EXPECT_EQ(lo, at);
      EXPECT_GT(hi, lo);
      at = hi;
    }
    EXPECT_EQ(at, total);
  }
  EXPECT_EQ(sync.stats().steps, 2u);
}

TEST(GradientSynchronizer, ReduceAndApplyLetsTheOthersTakeOverTheRangeOfAReplicaThatFallsBehind) {
  MirroredStrategy strategy(2);
  GradientSynchronizer sync({Shape{40000}}, 2);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges(2);
  Tensor got = Tensor::full({40000}, -1.0f);
  strategy.run([&](ReplicaContext& ctx) {
    int r = ctx.local_replica_id();
    sync.reduce_and_apply(ctx, {Tensor::full({40000}, static_cast<float>(r + 1))},
                          [&](const std::vector<Tensor>& sum, int64_t lo, int64_t hi) {
                            // Replica 1 stalls on its first piece (as if preempted) long enough for
                            // replica 0 to finish its own block and take the rest of replica 1's.
                            if (r == 1 && ranges[1].empty())
                              std::this_thread::sleep_for(std::chrono::milliseconds(200));
                            ranges[static_cast<size_t>(r)].emplace_back(lo, hi);
                            for (int64_t i = lo; i < hi; ++i)
                              got.data<float>()[i] = sum[0].data<float>()[i];
                          });
  });
  EXPECT_EQ(got.to_vector<float>(), std::vector<float>(40000, 3.0f));
  ASSERT_EQ(ranges[1].size(), 1u);
  EXPECT_EQ(ranges[1][0].first, static_cast<int64_t>(sync.owned_range(1).begin));
  int64_t done_by_0 = 0;
  for (auto [lo, hi] : ranges[0]) done_by_0 += hi - lo;
  EXPECT_EQ(done_by_0 + (ranges[1][0].second - ranges[1][0].first), 40000);
}

TEST(GradientSynchronizer, AccumulatedGradientsJoinTheNextSumWithoutCommunicating) {
  MirroredStrategy strategy(2);
  GradientSynchronizer sync({Shape{3}, Shape{2, 2}}, 2);
  // Replica r's gradient at step k is (r + 1) * 10^k: every partial sum is exact in float32.
  auto grads_at = [](ReplicaContext& ctx, int k) {
    float v = static_cast<float>((ctx.local_replica_id() + 1) * std::pow(10.0, k));
    return std::vector<Tensor>{Tensor::full({3}, v), Tensor::full({2, 2}, v)};
  };
  auto sums = strategy.run([&](ReplicaContext& ctx) {
    sync.accumulate(ctx, grads_at(ctx, 0));  // no_sync steps: nothing is exchanged
    sync.accumulate(ctx, grads_at(ctx, 1));
    std::vector<Tensor> out;
    const std::vector<Tensor>& s = sync.all_reduce(ctx, grads_at(ctx, 2));
    out.push_back(s[0].to(DType::float32));
    // The accumulator was emptied: the next step sums its own gradients only.
    const std::vector<Tensor>& t = sync.all_reduce(ctx, grads_at(ctx, 3));
    out.push_back(t[1].reshape({4}).to(DType::float32));
    return out;
  });
  for (const std::vector<Tensor>& s : sums.values) {
    EXPECT_EQ(s[0].to_vector<float>(), std::vector<float>(3, 3 * 111.0f));  // (1 + 2) * 111
    EXPECT_EQ(s[1].to_vector<float>(), std::vector<float>(4, 3 * 1000.0f));
  }
  EXPECT_EQ(sync.stats().steps, 2u);  // accumulate() is not a synchronisation
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

}  // namespace
}  // namespace lockstep::distribute
