// GradientReducer against fake replica runs and a fake second worker: the sum in replica order
// bit for bit, the accumulator summed first, the sole replica's buffer used as it is, the
// float32 and bfloat16 hooks across workers, and buckets shipped by the first run to fill them (a
// backup run winning).
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <vector>

#include "distribute/step/chunk_layout.h"
#include "distribute/step/comm_hook.h"
#include "distribute/step/gradient_reducer.h"
#include "distribute/step/replica_runs.h"
#include "step_fakes.h"

namespace lockstep::distribute {
namespace {

using testing::gradient_value;
using testing::make_strategy;
using testing::make_variables;
using testing::TwinWorker;

// Replica r's gradient of variable v is gradient_value(r, v, j, scale), except variable
// `missing` of replica `missing_replica`, which has none.
ReplicaFn fake_replica(float scale = 1.0f, int missing_replica = -1, size_t missing = 0) {
  return [=](ReplicaContext& ctx, ReplicaRun& run, const Element&) {
    const int r = ctx.local_replica_id();
    std::vector<Tensor> grads = run.gradient_buffers();
    for (size_t v = 0; v < grads.size(); ++v) {
      for (int64_t j = 0; j < grads[v].num_elements(); ++j)
        grads[v].data<float>()[j] = gradient_value(r, v, j, scale);
      if (r == missing_replica && v == missing) grads[v] = Tensor();
    }
    run.set_gradients(grads);
  };
}

// The sum as a plain loop: ((acc + g_0) + g_1) + ... in replica order.
float expected_sum(int replicas, size_t v, int64_t j, int missing_replica = -1, size_t missing = 0,
                   float acc = 0.0f, bool with_acc = false) {
  bool first = !with_acc;
  float s = acc;
  for (int r = 0; r < replicas; ++r) {
    if (r == missing_replica && v == missing) continue;
    s = first ? gradient_value(r, v, j) : s + gradient_value(r, v, j);
    first = false;
  }
  return first ? 0.0f : s;
}

struct Fixture {
  explicit Fixture(int replicas, int threads, std::vector<int64_t> sizes,
                   std::shared_ptr<Communicator> cross = nullptr, DType wire = DType::float32,
                   size_t bytes_per_bucket = 0)
      : sizes(std::move(sizes)),
        strategy(make_strategy(replicas, threads)),
        vars(make_variables(this->sizes)),
        layout(vars, threads),
        reducer(layout, cross, cross ? make_comm_hook(wire) : nullptr, bytes_per_bucket),
        runs(*strategy, vars,
             {.extra_elements = 2, .sink = &reducer, .sink_counters = reducer.num_buckets()}) {}
  void step(const ReplicaFn& fn) {
    runs.begin_step({}, fn);
    ASSERT_TRUE(runs.run_as_tasks(false));
    runs.retire_previous_step();
  }
  std::vector<int64_t> sizes;
  std::unique_ptr<Strategy> strategy;
  std::vector<Variable> vars;
  ChunkLayout layout;
  GradientReducer reducer;
  ReplicaRuns runs;
};

TEST(GradientReducer, SumsInReplicaOrderBitForBitOnAnyNumberOfThreads) {
  // 9000 elements: several chunks, the last cut short.
  for (int replicas : {1, 2, 3, 4}) {
    for (int threads : {1, 2, 3}) {
      Fixture f(replicas, threads, {9000, 7, 1});
      f.step(fake_replica(1.0f, replicas - 1, 1));
      float* sum = f.reducer.local_sum(f.strategy->task_pool(), f.runs.committed());
      const float* s = sum;
      for (size_t v = 0; v < f.sizes.size(); ++v) {
        for (int64_t j = 0; j < f.sizes[v]; ++j, ++s) {
          ASSERT_EQ(*s, expected_sum(replicas, v, j, replicas - 1, 1))
              << replicas << " replicas, " << threads << " threads, var " << v << "[" << j << "]";
        }
      }
    }
  }
}

TEST(GradientReducer, TheSoleReplicaWithEveryGradientIsTheSumAsItIs) {
  Fixture f(1, 1, {100, 3});
  f.step(fake_replica());
  EXPECT_EQ(f.reducer.local_sum(f.strategy->task_pool(), f.runs.committed()),
            f.runs.committed()[0]->flat_gradients());
}

TEST(GradientReducer, AccumulatedStepsAreSummedFirst) {
  Fixture f(2, 2, {5000, 9});
  f.step(fake_replica());
  f.reducer.accumulate(f.strategy->task_pool(), f.runs.committed());
  EXPECT_TRUE(f.reducer.has_accumulated());
  f.step(fake_replica());
  const float* sum = f.reducer.local_sum(f.strategy->task_pool(), f.runs.committed());
  for (size_t v = 0; v < f.sizes.size(); ++v) {
    for (int64_t j = 0; j < f.sizes[v]; ++j) {
      const float acc = expected_sum(2, v, j);
      ASSERT_EQ(sum[f.layout.begin(v) + j], expected_sum(2, v, j, -1, 0, acc, true));
    }
  }
  // Chunk by chunk, as the update reads it.
  const GradientReducer::Terms terms = f.reducer.terms(f.runs.committed());
  GradientReducer::Term t[2];
  EXPECT_EQ(GradientReducer::chunk_terms(f.layout.chunks()[0], terms, t), 3);
  EXPECT_EQ(GradientReducer::sole_gradient(f.layout.chunks()[0], terms), nullptr);
  f.reducer.clear_accumulated();
  EXPECT_FALSE(f.reducer.has_accumulated());
}

// A kernel multiplied in bfloat16 gets a bfloat16 gradient (Variable::gradient_dtype): where
// several local replicas are summed, its buffer is the first half of its float32 one, and its sum
// is that of the float32 values in replica order, bit for bit, whichever dtype each run kept it
// in (a run handing in a float32 gradient keeps it float32).
TEST(GradientReducer, Bfloat16GradientsAreSummedAsTheirFloat32Values) {
  Fixture f(3, 2, {5000, 9});
  f.vars[0].set_gradient_dtype(DType::bfloat16);
  auto value = [](int r, int64_t j) {
    return static_cast<float>(bfloat16(gradient_value(r, 0, j)));
  };
  f.step([&](ReplicaContext& ctx, ReplicaRun& run, const Element&) {
    const int r = ctx.local_replica_id();
    std::vector<Tensor> grads = run.gradient_buffers();
    EXPECT_EQ(grads[0].dtype(), DType::bfloat16);
    EXPECT_EQ(grads[1].dtype(), DType::float32);
    if (r == 1) grads[0] = Tensor({5000}, DType::float32);
    for (int64_t j = 0; j < 5000; ++j) {
      if (grads[0].dtype() == DType::bfloat16) {
        grads[0].data<bfloat16>()[j] = bfloat16(gradient_value(r, 0, j));
      } else {
        grads[0].data<float>()[j] = value(r, j);
      }
    }
    for (int64_t j = 0; j < 9; ++j) grads[1].data<float>()[j] = gradient_value(r, 1, j);
    run.set_gradients(grads);
  });
  const std::vector<ReplicaRun*>& runs = f.runs.committed();
  EXPECT_EQ(runs[0]->gradient_dtype(0), DType::bfloat16);
  EXPECT_EQ(runs[1]->gradient_dtype(0), DType::float32);
  EXPECT_EQ(runs[2]->gradient_dtype(0), DType::bfloat16);
  EXPECT_EQ(runs[0]->gradient_dtype(1), DType::float32);
  EXPECT_FALSE(runs[0]->float32_gradients());
  // As the update reads a chunk: the terms in replica order, each in its own dtype.
  const GradientReducer::Terms terms = f.reducer.terms(runs);
  GradientReducer::Term t[2];
  ASSERT_EQ(GradientReducer::chunk_terms(f.layout.chunks()[0], terms, t), 3);
  EXPECT_NE(t[0].bf16, nullptr);
  EXPECT_NE(t[1].f32, nullptr);
  EXPECT_EQ(GradientReducer::sole_gradient(f.layout.chunks()[0], terms), nullptr);
  const float* sum = f.reducer.local_sum(f.strategy->task_pool(), runs);
  for (int64_t j = 0; j < 5000; ++j) {
    ASSERT_EQ(sum[j], (value(0, j) + value(1, j)) + value(2, j)) << "element " << j;
  }
  for (int64_t j = 0; j < 9; ++j) ASSERT_EQ(sum[f.layout.begin(1) + j], expected_sum(3, 1, j));
}

// With one local replica the buffers stay float32 — the local sum is the run's own buffer,
// all-reduced in place across workers — and a bfloat16 gradient is widened into it.
TEST(GradientReducer, OneReplicasBfloat16GradientIsWidenedIntoItsFloat32Buffer) {
  Fixture f(1, 2, {5000, 9});
  f.vars[0].set_gradient_dtype(DType::bfloat16);
  f.step([&](ReplicaContext&, ReplicaRun& run, const Element&) {
    std::vector<Tensor> grads = run.gradient_buffers();
    EXPECT_EQ(grads[0].dtype(), DType::float32);
    Tensor g16({5000}, DType::bfloat16);
    for (int64_t j = 0; j < 5000; ++j) g16.data<bfloat16>()[j] = bfloat16(gradient_value(0, 0, j));
    grads[0] = g16;
    for (int64_t j = 0; j < 9; ++j) grads[1].data<float>()[j] = gradient_value(0, 1, j);
    run.set_gradients(grads);
  });
  const ReplicaRun& run = *f.runs.committed()[0];
  EXPECT_EQ(run.gradient_dtype(0), DType::float32);
  EXPECT_TRUE(run.float32_gradients());
  const float* sum = f.reducer.local_sum(f.strategy->task_pool(), f.runs.committed());
  EXPECT_EQ(sum, run.flat_gradients());
  for (int64_t j = 0; j < 5000; ++j) {
    ASSERT_EQ(sum[j], static_cast<float>(bfloat16(gradient_value(0, 0, j)))) << "element " << j;
  }
}

TEST(GradientReducer, Float32HookSumsAcrossWorkersWithTheExtraElements) {
  auto twin = std::make_shared<TwinWorker>();
  Fixture f(2, 2, {300, 4}, twin);
  f.step(fake_replica());
  float* sum = f.reducer.local_sum(f.strategy->task_pool(), f.runs.committed());
  sum[f.layout.total()] = 3.0f;
  f.reducer.all_reduce(sum, 1);
  EXPECT_EQ(f.reducer.wire_dtype(), DType::float32);
  EXPECT_EQ(sum[f.layout.total()], 6.0f);
  for (size_t v = 0; v < f.sizes.size(); ++v)
    for (int64_t j = 0; j < f.sizes[v]; ++j)
      ASSERT_EQ(sum[f.layout.begin(v) + j], 2.0f * expected_sum(2, v, j));
}

TEST(GradientReducer, Bfloat16HookRoundsEachWorkersSumAndWidensTheTotal) {
  auto twin = std::make_shared<TwinWorker>();
  Fixture f(2, 1, {300, 4}, twin, DType::bfloat16);
  f.step(fake_replica());
  float* sum = f.reducer.local_sum(f.strategy->task_pool(), f.runs.committed());
  f.reducer.all_reduce(sum);
  EXPECT_EQ(f.reducer.wire_dtype(), DType::bfloat16);
  for (size_t v = 0; v < f.sizes.size(); ++v) {
    for (int64_t j = 0; j < f.sizes[v]; ++j) {
      const float mine = static_cast<float>(bfloat16(expected_sum(2, v, j)));
      ASSERT_EQ(sum[f.layout.begin(v) + j], static_cast<float>(bfloat16(mine + mine)));
    }
  }
}

TEST(GradientReducer, RejectsAWireDtypeItCannotSend) {
  EXPECT_THROW(make_comm_hook(DType::int32), InvalidArgument);
}

// Two runs of the only replica (the second standing for its backup) report their gradients;
// the backup's reach each bucket first and are the ones that cross workers — with either hook.
TEST(GradientReducer, TheFirstRunToFillABucketShipsItABackupWinning) {
  for (DType wire : {DType::float32, DType::bfloat16}) {
    auto twin = std::make_shared<TwinWorker>();
    // 1 KiB buckets over variables of 100 floats: several buckets.
    Fixture f(1, 1, {100, 100, 100, 100, 100}, twin, wire, 1024);
    ASSERT_TRUE(f.reducer.can_overlap());
    ASSERT_GT(f.reducer.num_buckets(), 2u);
    f.step(fake_replica(1.0f));
    ReplicaRun* first = f.runs.committed()[0];
    // A second run in another slot; the first stays readable.
    f.runs.begin_step({}, fake_replica(2.0f));
    ASSERT_TRUE(f.runs.run_as_tasks(false));
    ReplicaRun* backup = f.runs.committed()[0];
    ASSERT_NE(first, backup);
    f.reducer.begin_overlap();
    for (size_t v = f.sizes.size(); v-- > 0;) f.reducer.gradient_ready(*backup, v);
    for (size_t v = f.sizes.size(); v-- > 0;) f.reducer.gradient_ready(*first, v);
    const float* sum = f.reducer.finish_overlap();
    for (size_t v = 0; v < f.sizes.size(); ++v) {
      for (int64_t j = 0; j < f.sizes[v]; ++j) {
        float mine = gradient_value(0, v, j, 2.0f);
        if (wire == DType::bfloat16) mine = static_cast<float>(bfloat16(mine));
        const float total =
            wire == DType::bfloat16 ? static_cast<float>(bfloat16(mine + mine)) : mine + mine;
        ASSERT_EQ(sum[f.layout.begin(v) + j], total) << "var " << v << "[" << j << "]";
      }
    }
    EXPECT_EQ(twin->all_reduces, static_cast<int>(f.reducer.num_buckets()));
    f.runs.retire_previous_step();
  }
}

TEST(GradientReducer, ACollectiveAfterABucketLeftIsAnError) {
  auto twin = std::make_shared<TwinWorker>();
  Fixture f(1, 1, {100, 100, 100}, twin, DType::float32, 512);
  f.step(fake_replica());
  f.reducer.begin_overlap();
  f.reducer.cancel_overlap();  // nothing left yet: fine
  f.reducer.begin_overlap();
  f.reducer.gradient_ready(*f.runs.committed()[0], 2);
  EXPECT_THROW(f.reducer.cancel_overlap(), Internal);
  for (size_t v = 0; v < 2; ++v) f.reducer.gradient_ready(*f.runs.committed()[0], v);
  f.reducer.finish_overlap();
}

}  // namespace
}  // namespace lockstep::distribute
