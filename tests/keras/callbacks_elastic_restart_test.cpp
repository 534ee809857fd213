// Elastic restart: a BackupAndRestore backup written by 4 replicas in sync resumes on another
// number of replicas (2, as after losing one of two hosts, or 3). Weights, optimizer slots and the
// step counter restore exactly; the global batch stays the same, each replica taking a larger
// share; the input continues at the saved step. Since N replicas on a global batch compute what
// one replica computes on it, the resumed run must follow a float64 reference trained on the same
// global batches throughout (written here from Keras' definitions: the MLP's forward and backward,
// cross-entropy from the softmax's logits, Adam's epsilon-hat update).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "lockstep/distribute/distributed_dataset.h"
#include "lockstep/distribute/strategies.h"
#include "lockstep/keras.h"
#include "testing/classification_data.h"

namespace lockstep::keras {
namespace {

constexpr int64_t kExamples = 40, kInputs = 8, kHidden = 10, kClasses = 3;
// 3 steps of 12 per epoch over passes of 40 shuffled examples: epochs end mid-pass, and each
// pass is shuffled anew, so resuming at the wrong step shows.
constexpr int64_t kGlobalBatch = 12, kStepsPerEpoch = 3;
constexpr int kEpochs = 4, kInterruptedAfter = 1;  // the backup holds epochs 0 and 1
constexpr double kLearningRate = 0.01;
constexpr uint64_t kShuffleSeed = 5;

using Vec = std::vector<double>;

// ---- float64 reference ---------------------------------------------------------------------

// dense(relu) -> dense(softmax), kernels row-major [in, out]; Adam state beside the weights.
struct Reference {
  Vec w1, b1, w2, b2;
  std::vector<Vec> m, v;
  int64_t t = 0;
  std::vector<Vec*> params() { return {&w1, &b1, &w2, &b2}; }
};

// One Adam step on a global batch of `n` examples: loss = sum of per-example cross-entropies / n,
// each computed from the logits z (gradient softmax(z) - y, y one-hot).
void reference_step(Reference& r, const std::vector<float>& x, const std::vector<float>& y,
                    int64_t n) {
  std::vector<Vec> g = {Vec(r.w1.size()), Vec(r.b1.size()), Vec(r.w2.size()), Vec(r.b2.size())};
  for (int64_t e = 0; e < n; ++e) {
    const float* xe = &x[static_cast<size_t>(e * kInputs)];
    const float* ye = &y[static_cast<size_t>(e * kClasses)];
    Vec pre(kHidden), h(kHidden), z(kClasses), dz(kClasses), dh(kHidden, 0.0);
    for (int64_t j = 0; j < kHidden; ++j) {
      double a = r.b1[j];
      for (int64_t i = 0; i < kInputs; ++i) a += xe[i] * r.w1[i * kHidden + j];
      pre[j] = a;
      h[j] = std::max(a, 0.0);
    }
    double zmax = -INFINITY, zsum = 0;
    for (int64_t k = 0; k < kClasses; ++k) {
      double a = r.b2[k];
      for (int64_t j = 0; j < kHidden; ++j) a += h[j] * r.w2[j * kClasses + k];
      z[k] = a;
      zmax = std::max(zmax, a);
    }
    for (int64_t k = 0; k < kClasses; ++k) zsum += std::exp(z[k] - zmax);
    for (int64_t k = 0; k < kClasses; ++k)
      dz[k] = (std::exp(z[k] - zmax) / zsum - ye[k]) / static_cast<double>(n);
    for (int64_t j = 0; j < kHidden; ++j) {
      for (int64_t k = 0; k < kClasses; ++k) {
        g[2][j * kClasses + k] += h[j] * dz[k];
        dh[j] += dz[k] * r.w2[j * kClasses + k];
      }
    }
    for (int64_t k = 0; k < kClasses; ++k) g[3][k] += dz[k];
    for (int64_t j = 0; j < kHidden; ++j) {
      const double d = pre[j] > 0 ? dh[j] : 0.0;
      g[1][j] += d;
      for (int64_t i = 0; i < kInputs; ++i) g[0][i * kHidden + j] += xe[i] * d;
    }
  }
  // Keras' Adam: m += (g - m)(1 - b1), v += (g^2 - v)(1 - b2),
  // w -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + 1e-7).
  const double b1 = 0.9, b2 = 0.999;
  std::vector<Vec*> p = r.params();
  if (r.m.empty()) {
    for (Vec* w : p) r.m.emplace_back(w->size(), 0.0), r.v.emplace_back(w->size(), 0.0);
  }
  ++r.t;
  const double alpha = kLearningRate * std::sqrt(1 - std::pow(b2, static_cast<double>(r.t))) /
                       (1 - std::pow(b1, static_cast<double>(r.t)));
  for (size_t k = 0; k < p.size(); ++k) {
    for (size_t i = 0; i < p[k]->size(); ++i) {
      r.m[k][i] += (g[k][i] - r.m[k][i]) * (1 - b1);
      r.v[k][i] += (g[k][i] * g[k][i] - r.v[k][i]) * (1 - b2);
      (*p[k])[i] -= alpha * r.m[k][i] / (std::sqrt(r.v[k][i]) + 1e-7);
    }
  }
}

// ---- fixtures ------------------------------------------------------------------------------

using Data = lockstep::testing::ClassificationData;

const Data& data() {
  static const Data d = lockstep::testing::random_classification(kExamples, kInputs, kClasses, 41);
  return d;
}

std::vector<Tensor> initial_weights() {
  std::mt19937_64 rng(43);
  auto uniform = [&](Shape shape, float limit) {
    return lockstep::testing::uniform_tensor(rng, shape, limit);
  };
  return {uniform({kInputs, kHidden}, 0.5f), uniform({kHidden}, 0.05f),
          uniform({kHidden, kClasses}, 0.6f), uniform({kClasses}, 0.05f)};
}

Reference reference_from(const std::vector<Tensor>& init) {
  Reference r;
  std::vector<Vec*> p = r.params();
  for (size_t k = 0; k < init.size(); ++k) {
    std::vector<float> f = init[k].to_vector<float>();
    p[k]->assign(f.begin(), f.end());
  }
  return r;
}

// The global pipeline: every pass over the examples shuffled anew, in global batches.
Dataset global_pipeline(int64_t batch = kGlobalBatch) {
  return Dataset::from_tensor_slices({data().x, data().y})
      .shuffle(kExamples, kShuffleSeed)
      .repeat()
      .batch(batch);
}

// Per-replica pipelines: replica i shuffles its own shard (every n-th example) and batches
// global / n of it.
Dataset per_replica_pipeline(const distribute::InputContext& ctx) {
  return Dataset::from_tensor_slices({data().x, data().y})
      .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
      .shuffle(kExamples, kShuffleSeed)
      .repeat()
      .batch(ctx.get_per_replica_batch_size(kGlobalBatch));
}

// One pipeline per worker (InputReplicationMode::PER_WORKER, the default): the worker's examples
// shuffled once, in per-replica batches that consecutive replicas take in turn.
Dataset per_worker_pipeline(const distribute::InputContext& ctx) {
  return Dataset::from_tensor_slices({data().x, data().y})
      .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
      .shuffle(kExamples, kShuffleSeed)
      .repeat()
      .batch(ctx.get_per_replica_batch_size(kGlobalBatch));
}

struct Global {
  std::vector<float> x, y;
  int64_t n = 0;
};

void append(Global& g, const Element& e) {
  std::vector<float> x = e[0].to_vector<float>(), y = e[1].to_vector<float>();
  g.x.insert(g.x.end(), x.begin(), x.end());
  g.y.insert(g.y.end(), y.begin(), y.end());
  g.n += e[0].dim(0);
}

// The global batches of `steps` steps of the global pipeline.
std::vector<Global> global_batches(int64_t steps) {
  std::vector<Global> out(static_cast<size_t>(steps));
  Iterator it = global_pipeline().make_iterator();
  for (Global& g : out) append(g, *it.next());
  return out;
}

// What `replicas` per-replica pipelines feed at steps [from, to): step s concatenates every
// replica's element s.
void per_replica_batches(int replicas, int64_t from, int64_t to, std::vector<Global>& out) {
  std::vector<Iterator> its;
  for (int r = 0; r < replicas; ++r) {
    its.push_back(per_replica_pipeline({.num_input_pipelines = replicas,
                                        .input_pipeline_id = r,
                                        .num_replicas_in_sync = replicas})
                      .make_iterator());
  }
  for (int64_t s = 0; s < to; ++s) {
    Global g;
    for (Iterator& it : its) {
      std::optional<Element> e = it.next();
      if (s >= from) append(g, *e);
    }
    if (s >= from) out.push_back(std::move(g));
  }
}

Reference train_reference(const std::vector<Global>& batches) {
  Reference r = reference_from(initial_weights());
  for (const Global& g : batches) reference_step(r, g.x, g.y, g.n);
  return r;
}

struct Fitted {
  std::vector<Tensor> weights;
  std::vector<Tensor> optimizer_variables;
  std::vector<std::pair<uint64_t, uint32_t>> dropout_positions;  // 8 replicas' worth
  int64_t iterations = 0;
  int restored_epoch = -1;
  int restored_replicas_in_sync = -1;
};

struct Interrupted {};

struct RunOptions {
  int epochs = kEpochs;
  bool interrupt = false;  // throw after the backup of epoch kInterruptedAfter
  bool delete_backup = true;
  bool dropout = false;
  int hidden = kHidden;
  bool sgd = false;
};

std::vector<Tensor> values_of(const std::vector<Variable>& vars) {
  std::vector<Tensor> out;
  for (const Variable& v : vars) out.push_back(v.raw_value().clone());
  return out;
}

// Builds the MLP on `strategy` from initial_weights(), fits `input` with BackupAndRestore(dir).
Fitted fit_with_backup(distribute::Strategy& strategy, const distribute::DistributedDataset& input,
                       const std::string& dir, RunOptions o = {}) {
  set_random_seed(7);  // the Dropout layer's seed
  auto scope = strategy.scope();
  std::vector<LayerArg> stack = {
      Input({kInputs}), layers::Dense({.units = o.hidden, .activation = "relu", .name = "hidden"})};
  if (o.dropout) stack.push_back(layers::Dropout(0.5));
  stack.push_back(layers::Dense({.units = kClasses, .activation = "softmax", .name = "output"}));
  Sequential model(stack);
  std::vector<Variable> ws = model.weights();
  if (o.hidden == kHidden) {
    std::vector<Tensor> init = initial_weights();
    for (size_t i = 0; i < ws.size(); ++i) ws[i].assign(init[i]);
  }
  model.compile(
      {.optimizer = o.sgd ? OptimizerArg(optimizers::SGD({.learning_rate = 0.01}))
                          : OptimizerArg(optimizers::Adam({.learning_rate = kLearningRate})),
       .loss = losses::CategoricalCrossentropy()});
  auto backup = std::make_shared<callbacks::BackupAndRestore>(dir, o.delete_backup);
  auto stop = std::make_shared<callbacks::LambdaCallback>(
      callbacks::LambdaCallbackOptions{.on_epoch_end = [&o](int epoch, const callbacks::Logs&) {
        if (o.interrupt && epoch == kInterruptedAfter) throw Interrupted{};
      }});
  try {
    model.fit(input, {.epochs = o.epochs,
                      .steps_per_epoch = kStepsPerEpoch,
                      .verbose = 0,
                      .callbacks = {backup, stop}});
  } catch (const Interrupted&) {
  }
  Fitted f;
  f.weights = values_of(ws);
  f.optimizer_variables = values_of(model.optimizer().variables());
  f.iterations = model.optimizer().iterations();
  f.restored_epoch = backup->restored_epoch();
  f.restored_replicas_in_sync = backup->restored_replicas_in_sync();
  for (const auto& layer : model.layers()) {
    if (auto* d = dynamic_cast<layers::Dropout*>(layer.get()))
      f.dropout_positions = d->generator_positions(8);
  }
  return f;
}

// Worst elementwise |got - want| / max(|want|, 1e-2), and the worst tensor's relative L2 error.
struct Comparison {
  double elementwise = 0, norm = 0;
};

Comparison compare(const std::vector<Tensor>& got, Reference& ref) {
  std::vector<Vec*> want = ref.params();
  Comparison c;
  for (size_t k = 0; k < got.size(); ++k) {
    std::vector<float> g = got[k].to_vector<float>();
    double diff2 = 0, want2 = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      const double w = (*want[k])[i], d = g[i] - w;
      c.elementwise = std::max(c.elementwise, std::abs(d) / std::max(std::abs(w), 1e-2));
      diff2 += d * d;
      want2 += w * w;
    }
    c.norm = std::max(c.norm, std::sqrt(diff2 / want2));
  }
  return c;
}

bool bit_identical(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].nbytes() != b[i].nbytes() ||
        std::memcmp(a[i].raw_data(), b[i].raw_data(), a[i].nbytes()) != 0)
      return false;
  }
  return true;
}

// The backups of every test of the process go under one directory, removed when its tests end so
// that runs do not pile directories up in the temporary directory. The process id in its name:
// CTest runs this binary under several ISA caps at once.
const std::string& scratch_root() {
  static const std::string root =
      ::testing::TempDir() + "elastic_restart_" + std::to_string(::getpid());
  return root;
}
class RemoveScratchRoot : public ::testing::Environment {
 public:
  void TearDown() override { std::filesystem::remove_all(scratch_root()); }
};
[[maybe_unused]] ::testing::Environment* const kRemoveScratchRoot =
    ::testing::AddGlobalTestEnvironment(new RemoveScratchRoot);

std::string fresh_dir(const std::string& name) {
  const std::string dir = scratch_root() + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(scratch_root());
  return dir;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void expect_matches_reference(const Fitted& got, Reference& want, const char* label) {
  Comparison c = compare(got.weights, want);
  std::printf("[ %s ] weights vs the float64 reference: %.3g (worst element), %.3g (norm)\n", label,
              c.elementwise, c.norm);
  EXPECT_LE(c.elementwise, 1e-5) << label;
  EXPECT_LE(c.norm, 1e-5) << label;
}

// ---- tests ---------------------------------------------------------------------------------

TEST(ElasticRestart, FourReplicaBackupResumesOnTwoOnTheSameGlobalBatches) {
  const std::string dir = fresh_dir("global");
  distribute::MirroredStrategy four(4), two(2);
  Fitted first = fit_with_backup(four, four.experimental_distribute_dataset(global_pipeline()), dir,
                                 {.interrupt = true});
  ASSERT_EQ(first.iterations, (kInterruptedAfter + 1) * kStepsPerEpoch);
  Fitted resumed =
      fit_with_backup(two, two.experimental_distribute_dataset(global_pipeline()), dir);
  EXPECT_EQ(resumed.restored_epoch, kInterruptedAfter);
  EXPECT_EQ(resumed.restored_replicas_in_sync, 4);
  EXPECT_EQ(resumed.iterations, kEpochs * kStepsPerEpoch);
  Reference want = train_reference(global_batches(kEpochs * kStepsPerEpoch));
  expect_matches_reference(resumed, want, "4 -> 2 replicas, global pipeline");
  EXPECT_FALSE(std::filesystem::exists(dir + "/backup.safetensors"));  // training completed
}

TEST(ElasticRestart, TwoReplicaBackupResumesOnThree) {
  const std::string dir = fresh_dir("two_to_three");
  distribute::MirroredStrategy two(2), three(3);
  fit_with_backup(two, two.experimental_distribute_dataset(global_pipeline()), dir,
                  {.interrupt = true});
  Fitted resumed =
      fit_with_backup(three, three.experimental_distribute_dataset(global_pipeline()), dir);
  EXPECT_EQ(resumed.restored_replicas_in_sync, 2);
  EXPECT_EQ(resumed.iterations, kEpochs * kStepsPerEpoch);
  Reference want = train_reference(global_batches(kEpochs * kStepsPerEpoch));
  expect_matches_reference(resumed, want, "2 -> 3 replicas, global pipeline");
}

// Weights, optimizer slots and the step counter come back bit for bit: resumed at the last epoch,
// fit has nothing left to train and ends with what the 4 replicas had backed up.
TEST(ElasticRestart, WeightsSlotsAndStepCounterRestoreExactly) {
  const std::string dir = fresh_dir("exact");
  distribute::MirroredStrategy four(4), two(2);
  Fitted first = fit_with_backup(four, four.experimental_distribute_dataset(global_pipeline()), dir,
                                 {.interrupt = true});
  Fitted restored = fit_with_backup(two, two.experimental_distribute_dataset(global_pipeline()),
                                    dir, {.epochs = kInterruptedAfter + 1, .delete_backup = false});
  EXPECT_EQ(restored.restored_epoch, kInterruptedAfter);
  EXPECT_EQ(restored.iterations, first.iterations);
  EXPECT_TRUE(bit_identical(restored.weights, first.weights));
  ASSERT_GT(first.optimizer_variables.size(), 4u);  // iterations, learning rate, m and v slots
  EXPECT_TRUE(bit_identical(restored.optimizer_variables, first.optimizer_variables));
}

// Per-replica pipelines shard the examples by replica, so the resumed run's batches are those of
// 2 pipelines from the saved step on: the reference switches from the 4 pipelines' global
// batches to the 2 pipelines' at that step.
TEST(ElasticRestart, PerReplicaPipelinesContinueAtTheSavedStepOfTheNewShards) {
  const std::string dir = fresh_dir("per_replica");
  const distribute::InputOptions per_replica{.experimental_replication_mode =
                                                 distribute::InputReplicationMode::PER_REPLICA};
  distribute::MirroredStrategy four(4), two(2);
  fit_with_backup(four, four.distribute_datasets_from_function(per_replica_pipeline, per_replica),
                  dir, {.interrupt = true});
  Fitted resumed = fit_with_backup(
      two, two.distribute_datasets_from_function(per_replica_pipeline, per_replica), dir);
  EXPECT_EQ(resumed.iterations, kEpochs * kStepsPerEpoch);
  const int64_t switch_at = (kInterruptedAfter + 1) * kStepsPerEpoch;
  std::vector<Global> batches;
  per_replica_batches(4, 0, switch_at, batches);
  per_replica_batches(2, switch_at, kEpochs * kStepsPerEpoch, batches);
  Reference want = train_reference(batches);
  expect_matches_reference(resumed, want, "4 -> 2 replicas, per-replica pipelines");
}

// One pipeline per worker of per-replica batches: 4 replicas take 4 of its elements per step, 2
// take 2 (each twice the size). The saved position counts steps, so the 2 replicas continue at
// the same example of the worker's order: the very global batches of the global pipeline.
TEST(ElasticRestart, PerWorkerPipelineIsReshardedToTheNewReplicaCount) {
  const std::string dir = fresh_dir("per_worker");
  distribute::MirroredStrategy four(4), two(2);
  fit_with_backup(four, four.distribute_datasets_from_function(per_worker_pipeline), dir,
                  {.interrupt = true});
  Fitted resumed =
      fit_with_backup(two, two.distribute_datasets_from_function(per_worker_pipeline), dir);
  EXPECT_EQ(resumed.iterations, kEpochs * kStepsPerEpoch);
  Reference want = train_reference(global_batches(kEpochs * kStepsPerEpoch));
  expect_matches_reference(resumed, want, "4 -> 2 replicas, per-worker pipeline");
}

// Dropout's per-replica mask streams cannot carry over to another replica count; every replica of
// the new layout continues its stream from the furthest block any saved replica had reached, so
// no mask repeats one drawn before the backup, and resuming twice gives the same weights.
TEST(ElasticRestart, DropoutStreamsAreDerivedForTheNewReplicaCount) {
  const std::string dir = fresh_dir("dropout");
  distribute::MirroredStrategy four(4), two(2), three(3);
  Fitted first = fit_with_backup(four, four.experimental_distribute_dataset(global_pipeline()), dir,
                                 {.interrupt = true, .dropout = true});
  uint64_t furthest = 0;
  for (int r = 0; r < 4; ++r) {
    EXPECT_GT(first.dropout_positions[r].first, 0u) << "replica " << r << " drew no mask";
    furthest = std::max(furthest, first.dropout_positions[r].first);
  }
  for (auto [strategy, replicas] : {std::pair{&two, 2}, std::pair{&three, 3}}) {
    Fitted restored = fit_with_backup(
        *strategy, strategy->experimental_distribute_dataset(global_pipeline()), dir,
        {.epochs = kInterruptedAfter + 1, .delete_backup = false, .dropout = true});
    for (int r = 0; r < 8; ++r) {
      const std::pair<uint64_t, uint32_t> want = r < replicas
                                                     ? std::pair<uint64_t, uint32_t>{furthest, 0}
                                                     : std::pair<uint64_t, uint32_t>{0, 0};
      EXPECT_EQ(restored.dropout_positions[r], want) << replicas << " replicas, replica " << r;
    }
  }
  // The same backup resumed twice on 2 replicas trains to the same bits.
  const std::string copy = fresh_dir("dropout_copy");
  std::filesystem::copy(dir, copy);
  RunOptions dropout{.dropout = true};
  Fitted a =
      fit_with_backup(two, two.experimental_distribute_dataset(global_pipeline()), dir, dropout);
  Fitted b =
      fit_with_backup(two, two.experimental_distribute_dataset(global_pipeline()), copy, dropout);
  EXPECT_EQ(a.restored_epoch, kInterruptedAfter);
  EXPECT_EQ(a.iterations, kEpochs * kStepsPerEpoch);
  EXPECT_TRUE(bit_identical(a.weights, b.weights));
}

// On the same number of replicas in sync the Dropout streams continue exactly: the resumed run
// is bit-identical to an uninterrupted one.
TEST(ElasticRestart, SameReplicaCountStillResumesBitIdenticalWithDropout) {
  const std::string dir = fresh_dir("same_count");
  distribute::MirroredStrategy two(2);
  Fitted uninterrupted = fit_with_backup(
      two, two.experimental_distribute_dataset(global_pipeline()), dir, {.dropout = true});
  fit_with_backup(two, two.experimental_distribute_dataset(global_pipeline()), dir,
                  {.interrupt = true, .dropout = true});
  Fitted resumed = fit_with_backup(two, two.experimental_distribute_dataset(global_pipeline()), dir,
                                   {.dropout = true});
  EXPECT_EQ(resumed.restored_epoch, kInterruptedAfter);
  EXPECT_TRUE(bit_identical(resumed.weights, uninterrupted.weights));
}

TEST(ElasticRestartErrors, AnotherModelOrOptimizerIsRefusedBeforeRestoring) {
  const std::string dir = fresh_dir("other_model");
  distribute::MirroredStrategy four(4), two(2);
  fit_with_backup(four, four.experimental_distribute_dataset(global_pipeline()), dir,
                  {.interrupt = true});
  for (RunOptions other : {RunOptions{.hidden = kHidden + 1}, RunOptions{.sgd = true}}) {
    try {
      fit_with_backup(two, two.experimental_distribute_dataset(global_pipeline()), dir, other);
      ADD_FAILURE() << "a backup of another model or optimizer was restored";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("written for a different model or optimizer"),
                std::string::npos)
          << e.what();
    }
  }
}

// The global batch must stay what it was: resuming on global batches of 8 instead of 12 (as
// `--batch-size 4` on 2 replicas would give after 4 x 3) stops at the first step, naming both,
// and leaves the backup as it was.
TEST(ElasticRestartErrors, AnotherGlobalBatchIsRefused) {
  const std::string dir = fresh_dir("other_batch");
  distribute::MirroredStrategy four(4), two(2);
  fit_with_backup(four, four.experimental_distribute_dataset(global_pipeline()), dir,
                  {.interrupt = true});
  const std::string before = read_file(dir + "/backup.safetensors");
  for (int64_t batch : {8, 16}) {
    try {
      fit_with_backup(two, two.experimental_distribute_dataset(global_pipeline(batch)), dir);
      ADD_FAILURE() << "resumed on a global batch of " << batch;
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("1 worker x 4 replicas (4 in sync) training on a global batch of 12"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("this job (1 worker x 2 replicas (2 in sync)) resumed it on global "
                          "batches of " +
                          std::to_string(batch)),
                std::string::npos)
          << what;
    }
    EXPECT_EQ(read_file(dir + "/backup.safetensors"), before);
  }
}

// A smaller first batch is the input's last, partial one when no step follows it: 76 examples
// make 6 batches of 12 and one of 4; the backup after 6 steps resumes on that last batch alone.
TEST(ElasticRestartErrors, APartialLastBatchAfterResumingIsNotAMismatch) {
  const std::string dir = fresh_dir("partial");
  Tensor x = Tensor::zeros({76, kInputs}), y = Tensor::zeros({76, kClasses});
  for (int64_t i = 0; i < 76; ++i) {
    std::memcpy(x.data<float>() + i * kInputs, data().x.data<float>() + (i % kExamples) * kInputs,
                kInputs * sizeof(float));
    std::memcpy(y.data<float>() + i * kClasses, data().y.data<float>() + (i % kExamples) * kClasses,
                kClasses * sizeof(float));
  }
  Dataset finite = Dataset::from_tensor_slices({x, y}).batch(kGlobalBatch);
  distribute::MirroredStrategy four(4), two(2);
  fit_with_backup(four, four.experimental_distribute_dataset(finite), dir, {.interrupt = true});
  Fitted resumed = fit_with_backup(two, two.experimental_distribute_dataset(finite), dir);
  EXPECT_EQ(resumed.restored_epoch, kInterruptedAfter);
  EXPECT_EQ(resumed.iterations, 7);  // the partial batch, then the input ended
}

// Where the input needs the global batch divided among the replicas (per-replica batches), a
// replica count that does not divide it is refused when the input is built, naming both.
TEST(ElasticRestartErrors, AGlobalBatchTheNewReplicasCannotDivideIsRefused) {
  distribute::MirroredStrategy five(5);
  try {
    five.distribute_datasets_from_function(
        per_replica_pipeline,
        {.experimental_replication_mode = distribute::InputReplicationMode::PER_REPLICA});
    FAIL() << "12 examples were split over 5 per-replica pipelines";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("global batch size (12) must be divisible by the number "
                                         "of replicas in sync (5)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace lockstep::keras
