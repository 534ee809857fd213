// fit on per-replica input pipelines (distribute_datasets_from_function with
// InputReplicationMode::PER_REPLICA): N replicas, each on its own pipeline, train to what one
// replica computes on the global batches those pipelines make up together, whether the replicas
// pull their batches themselves (infinite pipelines) or the host pulls them (finite ones).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "distribute/step/task_pool.h"
#include "lockstep/distribute/distributed_dataset.h"
#include "lockstep/distribute/strategies.h"
#include "lockstep/keras.h"
#include "testing/classification_data.h"

namespace lockstep::keras {
namespace {

constexpr int64_t kInputs = 20, kHidden = 16, kClasses = 4;

using Data = lockstep::testing::ClassificationData;

Data random_data(int64_t n, uint64_t seed) {
  return lockstep::testing::random_classification(n, kInputs, kClasses, seed);
}

// Rows `rows` of t, in that order (the reference's global batches).
Tensor take_rows(const Tensor& t, const std::vector<int64_t>& rows) {
  const int64_t width = t.num_elements() / t.dim(0);
  std::vector<float> out;
  for (int64_t r : rows) {
    const float* p = t.data<float>() + r * width;
    out.insert(out.end(), p, p + width);
  }
  return Tensor::from_vector(out, t.shape().with_dim(0, static_cast<int64_t>(rows.size())));
}

std::vector<Tensor> initial_weights(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](Shape shape, float limit) {
    return lockstep::testing::uniform_tensor(rng, shape, limit);
  };
  return {uniform({kInputs, kHidden}, 0.4f), uniform({kHidden}, 0.05f),
          uniform({kHidden, kClasses}, 0.5f), uniform({kClasses}, 0.05f)};
}

struct Fitted {
  std::vector<Tensor> weights;
  int64_t iterations = 0;
};

// Builds the MLP in `strategy`'s scope with `init`, then `train(model)`.
template <typename Train>
Fitted fit_with(distribute::Strategy& strategy, const std::vector<Tensor>& init, Train train) {
  auto scope = strategy.scope();
  // Named layers: a resumed run's backup must match the new model's weight names.
  Sequential model({Input({kInputs}),
                    layers::Dense({.units = kHidden, .activation = "relu", .name = "hidden"}),
                    layers::Dense({.units = kClasses, .activation = "softmax", .name = "output"})});
  std::vector<Variable> ws = model.weights();
  for (size_t i = 0; i < ws.size(); ++i) ws[i].assign(init[i]);
  model.compile({.optimizer = optimizers::Adam({.learning_rate = 0.01}),
                 .loss = losses::CategoricalCrossentropy()});
  train(model);
  Fitted f;
  for (const Variable& v : ws) f.weights.push_back(v.raw_value().clone());
  f.iterations = model.optimizer().iterations();
  return f;
}

double max_relative_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double worst = 0;
  for (size_t t = 0; t < a.size(); ++t) {
    for (int64_t i = 0; i < a[t].num_elements(); ++i) {
      const double x = a[t].data<float>()[i], y = b[t].data<float>()[i];
      worst = std::max(worst, std::abs(x - y) / std::max(std::abs(y), 1e-2));
    }
  }
  return worst;
}

class PerReplicaInput : public ::testing::TestWithParam<int> {};

// Replica i's pipeline: its shard (rows i, i + n, i + 2n, ...), repeated, in batches of b. Never
// ends, so every replica pulls its batches on its own thread. The reference: one replica on the
// global batches [replica 0's batch s, replica 1's batch s, ...].
TEST_P(PerReplicaInput, InfinitePipelinesPulledOnTheReplicasMatchOneReplica) {
  const int n = GetParam();
  constexpr int64_t kBatch = 6, kSteps = 4;
  const int64_t examples = n * kBatch * kSteps;
  Data data = random_data(examples, 3);
  std::vector<Tensor> init = initial_weights(5);

  std::vector<int64_t> order;
  for (int64_t s = 0; s < kSteps; ++s)
    for (int r = 0; r < n; ++r)
      for (int64_t j = 0; j < kBatch; ++j) order.push_back(r + n * (s * kBatch + j));
  distribute::MirroredStrategy one(1);
  Fitted expected = fit_with(one, init, [&](Model& m) {
    m.fit(Dataset::from_tensor_slices({take_rows(data.x, order), take_rows(data.y, order)})
              .repeat()
              .batch(n * kBatch),
          {.epochs = 3, .steps_per_epoch = kSteps, .verbose = 0});
  });

  std::mutex mu;
  std::set<std::thread::id> pulled_on;
  // Pulls on a thread that is neither the pool's nor the caller's (a pipeline thread of its own).
  int pulled_elsewhere = 0;
  const std::thread::id caller = std::this_thread::get_id();
  distribute::MirroredStrategy many(n);
  auto dist = many.distribute_datasets_from_function(
      [&](const distribute::InputContext& ctx) {
        return Dataset::from_tensor_slices({data.x, data.y})
            .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            .repeat()
            .batch(kBatch)
            .map([&](const Element& e) {
              std::lock_guard lock(mu);
              pulled_on.insert(std::this_thread::get_id());
              if (!distribute::TaskPool::on_helper_thread() && std::this_thread::get_id() != caller)
                ++pulled_elsewhere;
              return e;
            });
      },
      {.experimental_replication_mode = distribute::InputReplicationMode::PER_REPLICA});
  ASSERT_TRUE(dist.make_iterator().fetches_on_replicas());
  pulled_on.clear();
  pulled_elsewhere = 0;
  // The threads that run replica tasks (the training step's pool, the calling thread included).
  std::set<std::thread::id> task_threads;
  many.task_pool().set_run_hook([&](int kind, int, int, bool, uint64_t) {
    std::lock_guard lock(mu);
    if (kind == 0) task_threads.insert(std::this_thread::get_id());
  });
  Fitted got = fit_with(many, init, [&](Model& m) {
    m.fit(dist, {.epochs = 3, .steps_per_epoch = kSteps, .verbose = 0});
  });
  many.task_pool().set_run_hook({});

  EXPECT_EQ(got.iterations, 3 * kSteps);
  EXPECT_EQ(expected.iterations, 3 * kSteps);
  EXPECT_GT(max_relative_difference(expected.weights, init), 1e-3);  // the weights moved
  EXPECT_LE(max_relative_difference(got.weights, expected.weights), 1e-5);
  // Every batch is pulled by the step's threads — inside a replica task (the first step's, which
  // builds the model, by the host), or staged ahead by a pool thread the step left idle, which
  // may be a busy-machine extra that ran no replica task — never by a pipeline thread of its own.
  ASSERT_FALSE(task_threads.empty());
  ASSERT_FALSE(pulled_on.empty());
  EXPECT_EQ(pulled_elsewhere, 0) << "a batch was pulled outside the step's threads";
  int on_replica_threads = 0;
  for (const std::thread::id& id : pulled_on) on_replica_threads += task_threads.count(id);
  EXPECT_GT(on_replica_threads, 0) << "no batch was pulled by a thread that ran a replica";
}

INSTANTIATE_TEST_SUITE_P(Replicas, PerReplicaInput, ::testing::Values(2, 3),
                         [](const auto& info) { return std::to_string(info.param) + "Replicas"; });

// Finite pipelines of different lengths: the host pulls them, and a replica whose pipeline ended
// gets empty batches while the others go on. Replica 0 has 3 batches of 5, replica 1 has 2: the
// epoch has 3 steps, the last on 5 examples only.
TEST(PerReplicaInputFinite, UnevenPipelinesMatchOneReplicaOnTheSameExamples) {
  constexpr int64_t kBatch = 5;
  Data data = random_data(5 * kBatch, 9);
  std::vector<Tensor> init = initial_weights(13);
  // Replica 0: rows 0..14, replica 1: rows 15..24.
  std::vector<int64_t> order;
  for (int64_t s = 0; s < 3; ++s) {
    for (int64_t j = 0; j < kBatch; ++j) order.push_back(s * kBatch + j);
    if (s < 2)
      for (int64_t j = 0; j < kBatch; ++j) order.push_back(15 + s * kBatch + j);
  }
  ASSERT_EQ(order.size(), 25u);
  distribute::MirroredStrategy one(1);
  Fitted expected = fit_with(one, init, [&](Model& m) {
    // Global batches of 10, 10 and 5: the per-replica steps put together.
    m.fit(Dataset::from_tensor_slices({take_rows(data.x, order), take_rows(data.y, order)})
              .batch(2 * kBatch),
          {.epochs = 2, .verbose = 0});
  });
  distribute::MirroredStrategy two(2);
  auto dist = two.distribute_datasets_from_function(
      [&](const distribute::InputContext& ctx) {
        const int64_t begin = ctx.input_pipeline_id == 0 ? 0 : 15;
        const int64_t end = ctx.input_pipeline_id == 0 ? 15 : 25;
        return Dataset::from_tensor_slices({data.x.slice(begin, end), data.y.slice(begin, end)})
            .batch(kBatch);
      },
      {.experimental_replication_mode = distribute::InputReplicationMode::PER_REPLICA});
  EXPECT_EQ(dist.cardinality(), 3);
  Fitted got = fit_with(two, init, [&](Model& m) { m.fit(dist, {.epochs = 2, .verbose = 0}); });
  EXPECT_EQ(got.iterations, 6);
  EXPECT_EQ(expected.iterations, 6);
  EXPECT_LE(max_relative_difference(got.weights, expected.weights), 1e-5);
}

// BackupAndRestore over per-replica pipelines: a run interrupted after epoch 2 and resumed from
// its backup ends bit-identical to an uninterrupted one (every replica's pipeline continues from
// the saved position, shuffled as it would have been).
TEST(PerReplicaInputResume, AnInterruptedRunResumesBitIdentical) {
  Data data = random_data(96, 31);
  std::vector<Tensor> init = initial_weights(37);
  // The process id in the name: CTest runs this binary under several ISA caps at once.
  const std::string dir = ::testing::TempDir() + "per_replica_resume_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  struct Interrupted {};
  auto run = [&](bool interrupt) {
    distribute::MirroredStrategy two(2);
    auto dist = two.distribute_datasets_from_function(
        [&](const distribute::InputContext& ctx) {
          return Dataset::from_tensor_slices({data.x, data.y})
              .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
              .shuffle(48, /*seed=*/7)
              .repeat()
              .batch(5);  // 48 is no multiple of 5: epochs start mid-shuffle
        },
        {.experimental_replication_mode = distribute::InputReplicationMode::PER_REPLICA});
    auto stop = std::make_shared<callbacks::LambdaCallback>(callbacks::LambdaCallbackOptions{
        .on_epoch_end = [interrupt](int epoch, const callbacks::Logs&) {
          if (interrupt && epoch == 1) throw Interrupted{};
        }});
    return fit_with(two, init, [&](Model& m) {
      try {
        m.fit(dist, {.epochs = 4,
                     .steps_per_epoch = 7,
                     .verbose = 0,
                     .callbacks = {std::make_shared<callbacks::BackupAndRestore>(dir), stop}});
      } catch (const Interrupted&) {
      }
    });
  };
  Fitted uninterrupted = run(false);
  std::filesystem::remove_all(dir);
  Fitted first = run(true);
  EXPECT_EQ(first.iterations, 14);  // 2 epochs of 7 steps, then the interruption
  Fitted resumed = run(false);
  EXPECT_EQ(resumed.iterations, 28);
  ASSERT_EQ(resumed.weights.size(), uninterrupted.weights.size());
  for (size_t i = 0; i < resumed.weights.size(); ++i) {
    EXPECT_EQ(std::memcmp(resumed.weights[i].raw_data(), uninterrupted.weights[i].raw_data(),
                          resumed.weights[i].nbytes()),
              0)
        << "weight " << i;
  }
  std::filesystem::remove_all(dir);
}

// An error inside one replica's pipeline, raised on that replica's thread, ends fit with that
// error (the other replica, waiting for it in the gradient all-reduce, is released).
TEST(PerReplicaInputErrors, AnErrorInAReplicasPipelineReachesFit) {
  Data data = random_data(64, 21);
  distribute::MirroredStrategy two(2);
  auto dist = two.distribute_datasets_from_function(
      [&](const distribute::InputContext& ctx) {
        auto count = std::make_shared<int>(0);
        const int id = ctx.input_pipeline_id;
        return Dataset::from_tensor_slices({data.x, data.y})
            .shard(ctx.num_input_pipelines, id)
            .repeat()
            .batch(4)
            .map([count, id](const Element& e) {
              if (id == 1 && ++*count == 3) throw DataLoss("corrupt record in replica 1's shard");
              return e;
            });
      },
      {.experimental_replication_mode = distribute::InputReplicationMode::PER_REPLICA});
  try {
    fit_with(two, initial_weights(1),
             [&](Model& m) { m.fit(dist, {.epochs = 1, .steps_per_epoch = 10, .verbose = 0}); });
    FAIL() << "fit returned although replica 1's pipeline threw";
  } catch (const DataLoss& e) {
    EXPECT_NE(std::string(e.what()).find("corrupt record in replica 1's shard"), std::string::npos)
        << e.what();
  }
}

TEST(PerReplicaInputErrors, ADatasetDistributedForAnotherReplicaCountIsRefused) {
  Data data = random_data(16, 1);
  distribute::MirroredStrategy three(3);
  auto dist = three.distribute_datasets_from_function(
      [&](const distribute::InputContext&) {
        return Dataset::from_tensor_slices({data.x, data.y}).batch(4);
      },
      {.experimental_replication_mode = distribute::InputReplicationMode::PER_REPLICA});
  distribute::MirroredStrategy two(2);
  try {
    fit_with(two, initial_weights(1), [&](Model& m) { m.fit(dist, {.epochs = 1, .verbose = 0}); });
    FAIL() << "fit accepted a dataset distributed over 3 replicas on a 2-replica model";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("3 local replicas"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lockstep::keras
