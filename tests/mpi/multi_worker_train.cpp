// Trains a small MLP on deterministic synthetic data under one of three strategies and writes the
// final weights, so that run_equivalence_test.sh can compare
//   mpirun -np W multi_worker_train multi OUT   (MultiWorkerMirroredStrategy, W workers x L local
//                                                replicas from LOCKSTEP_DEVICES=cpu:L)
//   mpirun -np W multi_worker_train multi-overlap OUT   (the same, with small gradient buckets:
//                                                the all-reduce overlaps the backward pass)
//   multi_worker_train mirrored N OUT            (MirroredStrategy(N), one process)
//   multi_worker_train default 1 OUT             (the default strategy: 1 replica, global batch)
//   multi_worker_train compare A B REL           (exit 0 when every weight agrees within REL)
// The modes multi-bn, multi-bn-overlap and mirrored-bn train the same model with a
// BatchNormalization layer (momentum 0.5, so the moving statistics, summed over every replica of
// every worker after each step, move far from their start): 2 x 2 and 4 x 1 workers must match
// MirroredStrategy(4) — the same per-replica slices — not one replica, whose batch statistics
// are those of the whole global batch. multi-mixed-logs reads the batch-end logs (of fit and
// evaluate) on worker 0 only: they are computed after every step when any worker's callbacks
// read them (a collective), so the workers must agree on it or the job would hang.
// Each run also writes OUT.logs (every worker: OUT.logs.W): the reported numbers (loss and
// accuracy at every batch end and epoch end of fit, then evaluate's), which must be the global
// ones, equal on every worker and to the one-process runs.
// The output is one line per weight element, printed with 9 significant digits (enough to
// round-trip float32), so equal bits give equal files.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "lockstep/lockstep.h"

using namespace lockstep;

namespace {

constexpr int64_t kExamples = 96;
constexpr int64_t kFeatures = 6;
constexpr int64_t kClasses = 3;
constexpr int64_t kGlobalBatch = 16;  // 6 steps per epoch; 4 examples per replica with 4 replicas

// Inputs and labels from closed-form expressions: no generator, identical in every process.
Element synthetic_data() {
  Tensor x = Tensor::zeros({kExamples, kFeatures});
  Tensor y = Tensor::zeros({kExamples, kClasses});
  float* xd = x.data<float>();
  float* yd = y.data<float>();
  for (int64_t i = 0; i < kExamples; ++i) {
    double s = 0;
    for (int64_t j = 0; j < kFeatures; ++j) {
      double v = std::sin(0.37 * double(i + 1) * double(j + 1)) + 0.1 * double(j);
      xd[i * kFeatures + j] = static_cast<float>(v);
      s += v * double(j % 2 ? 1 : -1);
    }
    int64_t label = s < -0.5 ? 0 : (s < 0.5 ? 1 : 2);
    yd[i * kClasses + label] = 1.0f;
  }
  return {x, y};
}

// Records the logs of every batch end (fit and evaluate) in order.
class RecordLogs : public keras::callbacks::Callback {
 public:
  explicit RecordLogs(std::vector<float>* out) : out_(out) {}
  void on_train_batch_end(int64_t, const keras::callbacks::Logs& logs) override { add(logs); }
  void on_test_batch_end(int64_t, const keras::callbacks::Logs& logs) override { add(logs); }

 private:
  void add(const keras::callbacks::Logs& logs) {
    out_->push_back(static_cast<float>(logs.at("loss")));
    out_->push_back(static_cast<float>(logs.at("categorical_accuracy")));
  }
  std::vector<float>* out_;
};

// The optimizer's options beside the defaults: clipping by norm (the step computes the summed
// gradient's norms first) and gradient accumulation (the update adds an accumulator).
struct OptimizerVariant {
  bool clip = false;
  int accumulate = 1;
};

// missing_examples: every 16th example's one-hot label zeroed, so those six contribute no gradient
// (categorical cross-entropy is -Σ y log p): a training the equivalence bound must tell apart.
std::vector<float> train(distribute::Strategy* strategy, std::vector<float>* logs,
                         bool batch_norm = false, bool batch_logs = true,
                         OptimizerVariant variant = {}, bool missing_examples = false) {
  keras::set_random_seed(1234);
  Element data = synthetic_data();
  if (missing_examples) {
    float* yd = data[1].data<float>();
    for (int64_t i = kGlobalBatch - 1; i < kExamples; i += kGlobalBatch)
      std::fill(yd + i * kClasses, yd + (i + 1) * kClasses, 0.0f);
  }
  // A shuffle with a fixed seed exercises the "same global batches on every worker" rule.
  Dataset ds = Dataset::from_tensor_slices(data).shuffle(kExamples, 99).batch(kGlobalBatch);
  std::optional<distribute::Strategy::Scope> scope;
  if (strategy) scope.emplace(*strategy);
  std::vector<keras::LayerArg> layers = {keras::Input({kFeatures}),
                                         keras::layers::Dense({.units = 16, .activation = "relu"})};
  if (batch_norm) layers.push_back(keras::layers::BatchNormalization({.momentum = 0.5}));
  layers.push_back(keras::layers::Dense({.units = kClasses, .activation = "softmax"}));
  keras::Sequential model(std::move(layers));
  keras::optimizers::BaseOptions base;
  if (variant.clip) base.clipnorm = 0.05;
  if (variant.accumulate > 1) base.gradient_accumulation_steps = variant.accumulate;
  model.compile({.optimizer = keras::optimizers::Adam({.base = base}),
                 .loss = keras::losses::CategoricalCrossentropy(),
                 .metrics = {keras::metrics::CategoricalAccuracy()}});
  auto record = std::make_shared<RecordLogs>(logs);
  std::vector<std::shared_ptr<keras::callbacks::Callback>> fit_callbacks;
  if (batch_logs) fit_callbacks.push_back(record);
  keras::callbacks::History history =
      model.fit(ds, {.epochs = 3, .verbose = 0, .callbacks = fit_callbacks});
  for (const char* key : {"loss", "categorical_accuracy"})
    for (double v : history.history.at(key)) logs->push_back(static_cast<float>(v));
  for (const auto& [key, value] : model.evaluate(ds, {.verbose = 0, .callbacks = fit_callbacks}))
    logs->push_back(static_cast<float>(value));
  std::vector<float> out;
  for (const Variable& v : model.weights()) {
    Tensor t = v.raw_value();
    const float* d = t.data<float>();
    out.insert(out.end(), d, d + t.num_elements());
  }
  return out;
}

void write(const std::string& path, const std::vector<float>& w) {
  std::ofstream f(path);
  char buf[32];
  for (float v : w) {
    std::snprintf(buf, sizeof buf, "%.9g\n", static_cast<double>(v));
    f << buf;
  }
  if (!f) throw Unavailable("cannot write " + path);
}

std::vector<double> read(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw NotFound("cannot read " + path);
  std::vector<double> out;
  for (double v; f >> v;) out.push_back(v);
  return out;
}

int compare(const std::string& a, const std::string& b, double rel) {
  std::vector<double> x = read(a), y = read(b);
  if (x.size() != y.size() || x.empty()) {
    std::cerr << "FAIL: " << a << " has " << x.size() << " values, " << b << " has " << y.size()
              << "\n";
    return 1;
  }
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    // Relative to the weight's magnitude, with a floor so weights near zero compare absolutely.
    double err = std::abs(x[i] - y[i]) / std::max(1e-2, std::max(std::abs(x[i]), std::abs(y[i])));
    if (err > worst) worst = err, worst_i = i;
  }
  std::cout << a << " vs " << b << ": worst relative difference " << worst << " at element "
            << worst_i << " (" << x[worst_i] << " vs " << y[worst_i] << "), tolerance " << rel
            << "\n";
  return worst <= rel ? 0 : 1;
}

std::vector<int64_t> values(const Element& e) {
  const int64_t* d = e[0].data<int64_t>();
  return {d, d + e[0].num_elements()};
}

// FILE and AUTO on 4 text files of 1, 2, 3 and 4 lines (each worker writes its own identical
// copy): worker w reads exactly files j with j mod workers == w, and every worker takes as many
// steps as the worker with the fewest lines (one line per batch), worked out here from the sizes.
void check_file_shard(distribute::MultiWorkerMirroredStrategy& strategy) {
  const int w = strategy.worker_index(), workers = strategy.num_workers();
  auto fail = [&](const std::string& what) {
    throw Internal("worker " + std::to_string(w) + ": FILE sharding check failed: " + what);
  };
  std::string dir = "/tmp/lockstep_file_shard_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::vector<std::string> files;
  for (int j = 0; j < 4; ++j) {
    files.push_back(dir + "/part-" + std::to_string(j) + ".txt");
    std::ofstream f(files.back());
    for (int k = 0; k <= j; ++k) f << "line " << j << "." << k << "\n";
  }
  std::vector<std::string> mine;
  int64_t fewest = 1 << 30;
  for (int v = 0; v < workers; ++v) {
    int64_t lines = 0;
    for (int j = v; j < 4; j += workers) {
      lines += j + 1;
      if (v == w) mine.push_back(files[static_cast<size_t>(j)]);
    }
    fewest = std::min(fewest, lines);
  }
  Dataset ds =
      Dataset::list_files(dir + "/part-*.txt", /*shuffle=*/true, /*seed=*/5)
          .interleave([](const Element& e) { return TextLineDataset({bytes_string(e[0])}); }, 2)
          .batch(1);
  if (ds.shard_files(workers, w).input_files() != mine) fail("the worker's files");
  for (auto policy : {distribute::AutoShardPolicy::FILE, distribute::AutoShardPolicy::AUTO}) {
    auto dist = strategy.experimental_distribute_dataset(ds, policy);
    auto it = dist.make_iterator();
    int64_t steps = 0;
    while (it.next()) ++steps;
    if (steps != fewest) {
      fail("took " + std::to_string(steps) + " steps, expected " + std::to_string(fewest));
    }
  }
  // More workers than files: FILE refuses, AUTO falls back to DATA.
  if (workers > 1) {
    Dataset two = TextLineDataset({files[0]}).batch(1);
    try {
      strategy.experimental_distribute_dataset(two, distribute::AutoShardPolicy::FILE);
      fail("FILE with fewer files than workers did not throw");
    } catch (const InvalidArgument&) {
    }
    strategy.experimental_distribute_dataset(two, distribute::AutoShardPolicy::AUTO);
  }
  std::filesystem::remove_all(dir);
}

// The input policies on range(8).batch(8) (DATA) and range(8).batch(4) (OFF); expected slices
// written out from the rules in distributed_dataset.h.
void check_auto_shard(distribute::MultiWorkerMirroredStrategy& strategy) {
  const int w = strategy.worker_index(), workers = strategy.num_workers();
  const int local = strategy.num_local_replicas();
  auto fail = [&](const std::string& what) {
    throw Internal("worker " + std::to_string(w) + ": AutoShardPolicy check failed: " + what);
  };
  if (workers == 2 && local == 2) {
    auto data = strategy.experimental_distribute_dataset(Dataset::range(8).batch(8),
                                                         distribute::AutoShardPolicy::DATA);
    auto step = data.make_iterator().next();
    std::vector<int64_t> first = {4 * w, 4 * w + 1}, second = {4 * w + 2, 4 * w + 3};
    if (!step || values((*step)[0]) != first || values((*step)[1]) != second) fail("DATA slices");
    auto off = strategy.experimental_distribute_dataset(Dataset::range(8).batch(4),
                                                        distribute::AutoShardPolicy::OFF);
    auto it = off.make_iterator();
    step = it.next();
    if (!step || values((*step)[0]) != std::vector<int64_t>{0, 1} ||
        values((*step)[1]) != std::vector<int64_t>{2, 3} || it.last_global_batch_size() != 8) {
      fail("OFF splits the worker's own batch");
    }
  }
  try {
    strategy.experimental_distribute_dataset(Dataset::range(8).batch(4),
                                             distribute::AutoShardPolicy::FILE);
    fail("FILE on an in-memory dataset did not throw");
  } catch (const InvalidArgument&) {
  }
  check_file_shard(strategy);
}

int run(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "compare" && argc == 5) return compare(argv[2], argv[3], std::stod(argv[4]));
  if (argc != 4) {
    std::cerr
        << "usage: multi_worker_train multi|multi-overlap|multi-bn|multi-bn-overlap|"
           "multi-mixed-logs|multi-clip|multi-clip-accum|mirrored|mirrored-bn|"
           "mirrored-clip|mirrored-clip-accum|default|default-missing N OUT | compare A B REL\n";
    return 2;
  }
  std::string out = argv[3];
  const bool bn = mode.find("-bn") != std::string::npos;
  const OptimizerVariant variant{.clip = mode.find("-clip") != std::string::npos,
                                 .accumulate = mode.find("-accum") != std::string::npos ? 2 : 1};
  if (mode == "multi" || mode == "multi-overlap" || mode == "multi-bn" ||
      mode == "multi-bn-overlap" || mode == "multi-mixed-logs" || mode == "multi-clip" ||
      mode == "multi-clip-accum") {
    distribute::mpi_initialize(&argc, &argv);
    // multi-overlap: 256-byte gradient buckets, so the model's 4 gradients form 2 buckets and
    // the first crosses workers while backward computes the rest.
    const bool overlap = mode.find("overlap") != std::string::npos;
    distribute::MultiWorkerMirroredStrategy strategy(
        {.timeout_seconds = 60, .bytes_per_pack = overlap ? size_t{256} : 0});
    check_auto_shard(strategy);
    std::vector<float> logs;
    const bool batch_logs = mode != "multi-mixed-logs" || strategy.worker_index() == 0;
    std::vector<float> w = train(&strategy, &logs, bn, batch_logs, variant);
    if (strategy.is_chief()) write(out, w);
    write(out + ".logs." + std::to_string(strategy.worker_index()), logs);
    std::cout << "worker " << strategy.worker_index() << " of " << strategy.num_workers()
              << ": num_replicas_in_sync " << strategy.num_replicas_in_sync() << "\n";
    return 0;
  }
  if (mode == "mirrored" || mode == "mirrored-bn" || mode == "mirrored-clip" ||
      mode == "mirrored-clip-accum") {
    distribute::MirroredStrategy strategy(std::stoi(argv[2]));
    std::vector<float> logs;
    write(out, train(&strategy, &logs, bn, true, variant));
    write(out + ".logs", logs);
    return 0;
  }
  if (mode == "default" || mode == "default-missing") {
    std::vector<float> logs;
    write(out, train(nullptr, &logs, false, true, {}, mode == "default-missing"));
    write(out + ".logs", logs);
    return 0;
  }
  std::cerr << "unknown mode " << mode << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    distribute::abort_job(e);
  }
}
