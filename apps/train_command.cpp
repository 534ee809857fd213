// `lockstep train`: the seed program (784-128-10 MLP, Adam, categorical cross-entropy) with the
// knobs a user needs, reporting Keras' progress bar and the final test loss and accuracy.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "file_data.h"
#include "flag_checks.h"
#include "lockstep/core/cpu_cores.h"
#include "lockstep/lockstep.h"
#include "models.h"

namespace lockstep::apps {
namespace {

struct TrainArgs {
  std::string dataset = "fashion_mnist";
  std::string data_dir;
  int epochs = 5;
  int64_t batch_size = 128;
  int64_t global_batch_size = 0;
  int64_t steps_per_epoch = 0;
  std::string precision = "float32";
  uint64_t seed = 0;
  std::string save_weights, load_weights, history;
  std::string save_model, load_model;  // .keras archives
  std::string export_onnx;             // the inference graph (ONNX)
  bool model_given = false;            // --model was on the command line
  double timeout = 0;  // seconds a collective may wait for the other workers; 0: forever
  std::string backup_dir;
  int verbose = 1;
  int replicas = 0;
  int steps_per_execution = 1;
  std::string model = "mlp";
  double learning_rate = 0.001;            // Adam's default
  std::string learning_rate_schedule;      // constant or cosine; empty: the model's (models.h)
  std::string gradient_dtype = "float32";  // across workers (MPI); replicas of one process: float32
  int64_t bytes_per_pack = 0;              // gradient bucket size across workers; 0: 25 MiB
  std::string input_pipeline = "auto";     // global, per-replica, or auto (see add_train_command)
  std::string profile;                     // profile directory (docs/profiling.md); empty: off
  std::string profile_steps;               // A:B, parsed into profile_first and profile_last
  int64_t profile_first = 2, profile_last = std::numeric_limits<int64_t>::max();
  // --data SPEC (file_data.h) instead of --dataset.
  std::string data, validation_data;
  DataSpecOptions data_options;
  std::string image_shape;  // HxWxC, parsed into data_options.image_shape
  std::string auto_shard_policy = "auto";
  std::string cache = "memory";  // none, memory, or a file path
};

// --load-model is the whole starting point: with another one it would be a silent choice.
void check_load_model(const TrainArgs& a, bool given) {
  if (!given) return;
  if (a.model_given) {
    throw FlagError(
        "--load-model and --model cannot be combined: the .keras archive holds the "
        "architecture");
  }
  if (!a.load_weights.empty()) {
    throw FlagError(
        "--load-model and --load-weights cannot be combined: the .keras archive holds "
        "the weights");
  }
  if (!a.backup_dir.empty() &&
      std::filesystem::exists(keras::callbacks::BackupAndRestore(a.backup_dir).backup_path())) {
    throw FlagError("--load-model cannot start from '" + a.load_model + "' while --backup-dir '" +
                    a.backup_dir + "' holds a backup to resume from; remove one of them");
  }
}

// The accuracy metric of evaluate's results ("categorical_accuracy" for the built-in models; a
// loaded model names its own).
std::string accuracy_key(const std::map<std::string, double>& results) {
  for (const auto& [key, value] : results) {
    if (key.find("accuracy") != std::string::npos) return key;
  }
  throw InvalidArgument("the model has no accuracy metric; compile it with one.");
}
double accuracy_of(const std::map<std::string, double>& results) {
  return results.at(accuracy_key(results));
}
// The same in fit's history (per-epoch values), which exists whether or not there is test data.
template <typename History>
std::string history_accuracy_key(const History& history) {
  for (const auto& [key, values] : history) {
    if (key.find("accuracy") != std::string::npos && key.rfind("val_", 0) != 0) return key;
  }
  throw InvalidArgument("the model has no accuracy metric; compile it with one.");
}

// --profile-steps A:B, steps counted from 1, both included.
CLI::Validator profile_steps(TrainArgs& a) {
  return CLI::Validator(
      [&a](std::string& text) -> std::string {
        const auto colon = text.find(':');
        try {
          size_t used_a = 0, used_b = 0;
          if (colon == std::string::npos) throw std::invalid_argument(text);
          const std::string first = text.substr(0, colon), last = text.substr(colon + 1);
          const long long f = std::stoll(first, &used_a), l = std::stoll(last, &used_b);
          if (used_a != first.size() || used_b != last.size() || f < 1 || l < f)
            throw std::invalid_argument(text);
          a.profile_first = f;
          a.profile_last = l;
        } catch (const std::exception&) {
          throw FlagError(
              "--profile-steps must be A:B with 1 ≤ A ≤ B (steps counted from 1), "
              "got '" +
              text + "'");
        }
        return "";
      },
      "A:B");
}

// uint8 pixels -> float32 / 255 in one pass (it runs on the host thread, next to the replicas).
// Keeps the images uint8 (a view reshaped to [B, 784]: no copy, a quarter of float32's bytes) and
// one-hot encodes the labels; the model's Rescaling layer converts the pixels on each replica.
Element preprocess(const Element& batch) {
  const Tensor& images = batch[0];
  return {images.reshape({-1, 784}), one_hot(batch[1].to(DType::int64), 10)};
}

// The model's input: the built-in datasets' uint8 [784], or what --data holds.
struct InputDesc {
  std::vector<int64_t> shape = {28, 28, 1};
  DType dtype = DType::uint8;
  int64_t classes = 10;
  double scale = 1.0 / 255;  // uint8 pixels to [0, 1]; CSV features by their largest magnitude
  int64_t flat() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

Dataset::MapFn preprocess_for(const InputDesc& in) {
  const int64_t flat = in.flat(), classes = in.classes;
  return [flat, classes](const Element& batch) {
    return Element{batch[0].reshape({-1, flat}), one_hot(batch[1].to(DType::int64), classes)};
  };
}

// --data: this worker's share of the files, cached as --cache says, shuffled, repeated and batched
// (per-worker batches when sharded by file or not at all, global batches when by data); the
// number of steps per epoch agreed by every worker; the model's input from the data.
struct FileTraining {
  std::optional<distribute::DistributedDataset> input;  // --cache none or PATH: streamed
  Tensor x, y;                // --cache memory: this worker's decoded examples, contiguous
  bool worker_local = false;  // x, y differ between workers (sharded by file, or off)
  int64_t steps = 0;
  InputDesc desc;
  std::string policy;  // as applied
};

FileTraining prepare_file_training(const TrainArgs& a, distribute::Strategy& strategy,
                                   int64_t global_batch, bool spare_core) {
  FileInput in = open_file_input(a.data, a.data_options);
  const int workers = strategy.num_workers(), w = strategy.worker_index();
  std::string policy = a.auto_shard_policy;
  if (policy == "auto") {
    policy = "data";
    if (workers > 1) {
      try {
        in.examples.shard_files(workers, w);
        policy = "file";
      } catch (const InvalidArgument&) {
      }
    }
  }
  if (policy == "file") {
    // Which worker reads each file, gathered from the workers themselves (a collective: every
    // worker takes part), for the report below.
    const std::vector<std::string> all = in.labels.input_files();
    const std::vector<std::string> mine = in.labels.shard_files(workers, w).input_files();
    std::vector<double> reader(all.size() * 2, 0.0);  // per file: sum of (worker + 1), readers
    for (const std::string& f : mine) {
      const auto j = static_cast<size_t>(std::find(all.begin(), all.end(), f) - all.begin());
      if (j < all.size()) {
        reader[2 * j] += w + 1;
        reader[2 * j + 1] += 1;
      }
    }
    strategy.all_reduce_across_workers(reader, distribute::ReduceOp::SUM);
    if (a.verbose > 0) {
      for (int v = 0; v < workers; ++v) {
        std::string names;
        int count = 0;
        for (size_t j = 0; j < all.size(); ++j) {
          if (reader[2 * j + 1] != 1 || reader[2 * j] != v + 1) continue;
          names += (names.empty() ? "" : ", ") + std::filesystem::path(all[j]).filename().string();
          ++count;
        }
        std::cout << "data: worker " << v << " of " << workers << " reads " << count << " of "
                  << all.size() << " files: " << names << "\n";
      }
    }
  }
  // Count this worker's examples and the classes from the labels alone (nothing decoded).
  Dataset counted = policy == "file" ? in.labels.shard_files(workers, w) : in.labels;
  int64_t n = 0, max_label = -1;
  Element e;
  for (Iterator it = counted.make_iterator(); it.next(e); ++n) {
    const int64_t label = static_cast<int64_t>(e[0].item());
    LOCKSTEP_CHECK_AS(DataLoss, label >= 0, "--data: a label of ", label, " is negative (example ",
                      n, ").");
    max_label = std::max(max_label, label);
  }
  std::vector<double> agreed = {-static_cast<double>(n), static_cast<double>(max_label)};
  strategy.all_reduce_across_workers(agreed, distribute::ReduceOp::MAX);
  const int64_t fewest = static_cast<int64_t>(-agreed[0]);
  FileTraining ft;
  ft.policy = policy;
  ft.desc = {in.shape, in.dtype, in.classes > 0 ? in.classes : static_cast<int64_t>(agreed[1]) + 1,
             1.0 / 255};
  if (in.dtype == DType::float32) {
    // Numeric features (CSV) are scaled by the largest magnitude any of them takes (a pass over
    // the parsed rows; every worker agrees): pixel columns of 0..255 become [0, 1] as images do.
    double most = 0;
    Dataset rows = policy == "file" ? in.examples.shard_files(workers, w) : in.examples;
    for (Iterator it = rows.make_iterator(); it.next(e);) {
      const float* x = e[0].data<float>();
      for (int64_t i = 0; i < e[0].num_elements(); ++i)
        most = std::max(most, std::fabs(double{x[i]}));
    }
    strategy.all_reduce_across_workers(std::span<double>(&most, 1), distribute::ReduceOp::MAX);
    ft.desc.scale = most > 0 ? 1.0 / most : 1.0;
  }
  LOCKSTEP_CHECK_AS(DataLoss, static_cast<int64_t>(agreed[1]) < ft.desc.classes, "--data: label ",
                    static_cast<int64_t>(agreed[1]), " is outside the ", ft.desc.classes,
                    " classes.");
  const bool per_worker = policy == "file" || policy == "off";
  const int64_t batch = per_worker ? global_batch / workers : global_batch;
  LOCKSTEP_CHECK(batch > 0, "--data: the global batch ", global_batch, " is smaller than the ",
                 workers, " workers.");
  ft.steps = (per_worker ? fewest * workers : fewest) / global_batch;
  Dataset ds = in.examples;
  if (a.cache == "memory") {
    // Decoded once (in parallel) into two contiguous tensors, which then take the built-in
    // datasets' path: index shuffles, row gathers, per-replica pipelines.
    Dataset mine = per_worker && policy == "file" ? ds.shard_files(workers, w) : ds;
    const auto start = std::chrono::steady_clock::now();
    std::vector<Element> chunks;
    int64_t rows = 0;
    for (Element& b : mine.batch(4096)) {
      rows += b[0].dim(0);
      chunks.push_back(b);
    }
    LOCKSTEP_CHECK_AS(DataLoss, rows == n, "--data: the files changed while read (", n,
                      " examples counted, ", rows, " decoded).");
    for (int c = 0; c < 2 && !chunks.empty(); ++c) {
      std::vector<int64_t> dims(chunks[0][c].shape().dims().begin(),
                                chunks[0][c].shape().dims().end());
      dims[0] = rows;
      Tensor all(Shape(dims), chunks[0][c].dtype());
      size_t at = 0;
      for (const Element& b : chunks) {
        std::memcpy(static_cast<char*>(all.raw_data()) + at, b[c].raw_data(), b[c].nbytes());
        at += b[c].nbytes();
      }
      (c == 0 ? ft.x : ft.y) = all;
    }
    ft.worker_local = per_worker;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (a.verbose > 0) {
      std::cout << "decoded " << rows << " examples into memory in " << seconds << " s ("
                << static_cast<int64_t>(static_cast<double>(rows) / std::max(seconds, 1e-9))
                << " examples/s)\n";
    }
    return ft;
  }
  if (a.cache != "none") {
    ds = ds.cache(a.cache + (workers > 1 ? "." + std::to_string(w) : ""));
  }
  ds = ds.shuffle(std::min<int64_t>(std::max<int64_t>(n, 1), 100000), a.seed)
           .repeat()
           .batch(batch)
           .map(preprocess_for(ft.desc));
  // A prefetch thread only where a core is free of replicas: at nice 19 beside a worker that
  // busy-waits in MPI it would hardly run.
  if (spare_core) ds = ds.prefetch(Dataset::AUTOTUNE);
  const distribute::AutoShardPolicy p = policy == "file"  ? distribute::AutoShardPolicy::FILE
                                        : policy == "off" ? distribute::AutoShardPolicy::OFF
                                                          : distribute::AutoShardPolicy::DATA;
  ft.input = strategy.experimental_distribute_dataset(ds, p);
  return ft;
}

// The strategy for the cluster `resolver` describes, resolved as `lockstep devices` resolves it.
std::unique_ptr<distribute::Strategy> make_strategy(const TrainArgs& a,
                                                    const ClusterResolver& resolver) {
  // Under mpirun (or srun with PMI) every process is one worker of the job.
  if (has_mpi_environment(Environment::process())) {
    return std::make_unique<distribute::MultiWorkerMirroredStrategy>(
        resolver,
        distribute::CommunicationOptions{
            .timeout_seconds = a.timeout,
            .bytes_per_pack = static_cast<size_t>(a.bytes_per_pack),
            .gradient_dtype = a.gradient_dtype == "bfloat16" ? DType::bfloat16 : DType::float32});
  }
  return std::make_unique<distribute::AcceleratorStrategy>(resolver);
}

int run_train(const TrainArgs& a, const ClusterResolver& resolver) {
  // Layers read the global policy when they are constructed: set it before the model is built.
  keras::mixed_precision::set_global_policy(a.precision);
  keras::set_random_seed(a.seed);
  // The run first prints the job's layout as `lockstep devices` does (under a launcher only the
  // chief, the others run with verbose 0): hosts, workers per host, the replicas and their cores,
  // and how this host's cores were divided. initialize_system gathers every worker's host name,
  // so every worker calls it.
  const bool launched = has_mpi_environment(Environment::process());
  if (!launched) connect_to_cluster(resolver);
  const Topology topology = initialize_system(resolver);
  if (a.verbose > 0) std::cout << topology.to_string();
  auto owned = make_strategy(a, resolver);
  distribute::Strategy& strategy = *owned;
  int replicas = strategy.num_replicas_in_sync();
  if (a.global_batch_size == 0 && a.batch_size > std::numeric_limits<int64_t>::max() / replicas) {
    throw InvalidArgument("--batch-size " + std::to_string(a.batch_size) + " times " +
                          std::to_string(replicas) + " replicas overflows the global batch size.");
  }
  int64_t global_batch = a.global_batch_size > 0 ? a.global_batch_size : a.batch_size * replicas;
  const CoreDivision division = resolver.core_division();
  if (a.verbose > 0) {
    std::cout << "num_replicas_in_sync: " << replicas << " - global batch: " << global_batch
              << "\n";
  }
  // Per-replica pipelines batch global / replicas examples each, so they need a global batch the
  // replicas divide; the global pipeline splits any batch (tf.distribute's rebatching: 250 over 4
  // replicas is 63, 63, 63, 61), with the loss of every step divided by its global batch.
  const bool even = global_batch % replicas == 0;
  if (a.input_pipeline == "per-replica" && !even) {
    throw InvalidArgument("--input-pipeline per-replica needs a global batch that the " +
                          std::to_string(replicas) + " replicas in sync divide, got " +
                          std::to_string(global_batch) +
                          "; use --input-pipeline global (or auto), which splits uneven batches "
                          "over the replicas.");
  }

  InputDesc desc;
  datasets::TrainTest data;
  bool worker_local = false;  // each worker trains on its own examples (per-worker batches)
  std::optional<distribute::DistributedDataset> train_input;
  std::optional<Dataset> test_data;
  int64_t train_examples = 0, steps = 0;
  bool per_replica = false;
  if (!a.data.empty()) {
    const bool spare_core = strategy.num_local_replicas() * division.local_workers <
                            static_cast<int>(available_cores().size());
    FileTraining ft = prepare_file_training(a, strategy, global_batch, spare_core);
    desc = ft.desc;
    train_input = std::move(ft.input);
    if (ft.x.defined()) {
      data.first = {ft.x, ft.y};
      worker_local = ft.worker_local;
    }
    train_examples = ft.steps * global_batch;
    steps = a.steps_per_epoch > 0 ? a.steps_per_epoch : ft.steps;
    if (a.verbose > 0) {
      std::cout << "data: " << a.data << " - input " << Shape(desc.shape).to_string() << " "
                << dtype_name(desc.dtype) << " x " << desc.scale << ", " << desc.classes
                << " classes - sharded by " << ft.policy << " - cache: " << a.cache << "\n";
    }
    if (!a.validation_data.empty()) {
      FileInput v = open_file_input(a.validation_data, a.data_options);
      LOCKSTEP_CHECK(v.shape == desc.shape, "--validation-data: its examples are ", Shape(v.shape),
                     ", the training data's ", Shape(desc.shape), ".");
      test_data = v.examples.batch(global_batch).map(preprocess_for(desc));
    }
  }
  if (a.data.empty()) {
    data = a.dataset == "mnist" ? datasets::mnist::load_data(a.data_dir)
                                : datasets::fashion_mnist::load_data(a.data_dir);
    train_examples = data.first.first.dim(0);
    steps = a.steps_per_epoch > 0 ? a.steps_per_epoch : train_examples / global_batch;
  }
  auto& [x_train, y_train] = data.first;
  auto& [x_test, y_test] = data.second;
  if (steps <= 0) {
    throw InvalidArgument(
        (a.global_batch_size > 0
             ? "--global-batch-size " + std::to_string(global_batch)
             : "The global batch (--batch-size " + std::to_string(a.batch_size) + " x " +
                   std::to_string(replicas) + " replicas = " + std::to_string(global_batch) + ")") +
        " is larger than the training set (" + std::to_string(train_examples) + " examples).");
  }
  // auto: one pipeline per replica when the replicas of this host occupy every core (a host
  // pipeline thread would take time from one of them), else one global pipeline prefetched on a
  // spare core. Under mpirun the host's replicas are those of every local rank.
  // An uneven global batch takes the global pipeline (see above).
  const int local_ranks = division.local_workers;
  per_replica =
      !train_input &&
      (a.input_pipeline == "per-replica" ||
       (a.input_pipeline == "auto" && even &&
        strategy.num_local_replicas() * local_ranks >= static_cast<int>(available_cores().size())));
  const Dataset::MapFn prep = preprocess_for(desc);
  const int local = strategy.num_local_replicas();
  if (train_input) {
    // Streamed from the files (--data with --cache none or PATH), built above.
  } else if (per_replica) {
    // tf.distribute's per-replica input: replica i shuffles and batches its own shard (every
    // num_replicas-th example) on its own thread.
    train_input = strategy.distribute_datasets_from_function(
        [&](const distribute::InputContext& ctx) {
          // Examples of this worker only: its replicas split them among themselves.
          const int pipelines = worker_local ? local : ctx.num_input_pipelines;
          const int id = worker_local ? ctx.input_pipeline_id % local : ctx.input_pipeline_id;
          const int64_t shard = x_train.dim(0) / pipelines;
          return Dataset::from_tensor_slices({x_train, y_train})
              .shard(pipelines, id)
              .shuffle(shard, a.seed)
              .repeat()
              .batch(ctx.get_per_replica_batch_size(global_batch))
              .map(prep);
        },
        {.experimental_replication_mode = distribute::InputReplicationMode::PER_REPLICA});
  } else {
    const int64_t batch = worker_local ? global_batch / strategy.num_workers() : global_batch;
    train_input = strategy.experimental_distribute_dataset(
        Dataset::from_tensor_slices({x_train, y_train})
            .shuffle(x_train.dim(0), a.seed)
            .repeat()
            .batch(batch)
            .map(prep)
            .prefetch(Dataset::AUTOTUNE),
        worker_local ? distribute::AutoShardPolicy::OFF : distribute::AutoShardPolicy::DATA);
  }
  if (a.verbose > 0) {
    std::cout << "input pipeline: " << (per_replica ? "one per replica" : "global, prefetched");
    if (!even) {
      std::cout << " (" << global_batch << " examples split unevenly over " << replicas
                << " replicas)";
    }
    std::cout << "\n";
    std::cout << "step: " << strategy.num_local_replicas() << " replica task(s) on "
              << strategy.num_threads()
              << " thread(s); a task held by a slow thread is re-run on an idle one\n";
  }

  // The schedule runs over every step of this run: a run resumed by BackupAndRestore continues on
  // the same curve, since a schedule reads the optimizer's restored iteration count.
  const std::string schedule = a.learning_rate_schedule.empty()
                                   ? model_choice(a.model).learning_rate_schedule
                                   : a.learning_rate_schedule;
  keras::optimizers::LearningRate learning_rate = a.learning_rate;
  if (schedule == "cosine") {
    learning_rate = std::make_shared<keras::optimizers::schedules::CosineDecay>(
        keras::optimizers::schedules::CosineDecayOptions{.initial_learning_rate = a.learning_rate,
                                                         .decay_steps = steps * a.epochs});
  }
  if (a.verbose > 0) {
    std::cout << "optimizer: Adam, learning rate " << a.learning_rate;
    if (schedule == "cosine") std::cout << " decayed to 0 over " << steps * a.epochs << " steps";
    std::cout << "\n";
  }

  auto scope = strategy.scope();
  // --load-model continues the saved run: its architecture, weights, optimizer (and state), loss
  // and metrics; otherwise the built-in model, compiled afresh.
  std::shared_ptr<keras::Model> loaded;
  if (!a.load_model.empty()) {
    loaded = keras::saving::load_model(a.load_model);
    if (!loaded->compiled()) {
      throw InvalidArgument("--load-model: '" + a.load_model +
                            "' was saved without compile_config; train needs its optimizer and "
                            "loss.");
    }
  }
  std::shared_ptr<keras::Model> owned_model =
      loaded ? loaded
             : std::make_shared<keras::Sequential>(
                   build_model_layers(a.model, ModelInput{.shape = desc.shape,
                                                          .dtype = desc.dtype,
                                                          .scale = desc.scale,
                                                          .classes = desc.classes}));
  keras::Model& model = *owned_model;
  if (!a.load_weights.empty()) model.load_weights(a.load_weights);
  if (!loaded) {
    model.compile({.optimizer = keras::optimizers::Adam({.learning_rate = learning_rate}),
                   .loss = keras::losses::CategoricalCrossentropy(),
                   .metrics = {keras::metrics::CategoricalAccuracy()},
                   .steps_per_execution = a.steps_per_execution});
  }
  auto epoch_times = std::make_shared<std::vector<double>>();
  auto timer =
      std::make_shared<keras::callbacks::LambdaCallback>(keras::callbacks::LambdaCallbackOptions{
          .on_epoch_begin =
              [epoch_times](int, const keras::callbacks::Logs&) {
                epoch_times->push_back(-std::chrono::duration<double>(
                                            std::chrono::steady_clock::now().time_since_epoch())
                                            .count());
              },
          .on_epoch_end =
              [epoch_times](int, const keras::callbacks::Logs&) {
                epoch_times->back() += std::chrono::duration<double>(
                                           std::chrono::steady_clock::now().time_since_epoch())
                                           .count();
              }});
  std::vector<std::shared_ptr<keras::callbacks::Callback>> callbacks = {timer};
  if (!a.backup_dir.empty()) {
    callbacks.push_back(std::make_shared<keras::callbacks::BackupAndRestore>(a.backup_dir));
  }
  if (!a.profile.empty()) {
    callbacks.push_back(std::make_shared<keras::callbacks::Profiler>(
        keras::callbacks::ProfilerOptions{.log_dir = a.profile,
                                          .first_step = a.profile_first,
                                          .last_step = a.profile_last,
                                          .print_summary = a.verbose > 0}));
  }
  auto history = model.fit(
      *train_input,
      {.epochs = a.epochs, .steps_per_epoch = steps, .verbose = a.verbose, .callbacks = callbacks});
  // --data without --validation-data: nothing to test on (the history's test_* are null).
  const bool tested = a.data.empty() || test_data.has_value();
  std::map<std::string, double> test;
  if (tested) {
    test = model.evaluate(
        test_data
            ? *test_data
            : Dataset::from_tensor_slices({x_test, y_test}).batch(global_batch).map(preprocess));
  }
  if (strategy.worker_index() == 0) {
    if (tested) {
      std::cout << "test loss: " << test["loss"] << " - test accuracy: " << accuracy_of(test)
                << "\n";
    } else if (a.verbose > 0) {
      std::cout << "no --validation-data: no test evaluation\n";
    }
  }
  if (!a.save_weights.empty()) model.save_weights(a.save_weights);
  if (!a.save_model.empty()) model.save(a.save_model);
  if (!a.export_onnx.empty()) keras::export_onnx(model, a.export_onnx, {.opset = 17});
  if (!a.history.empty()) {
    nlohmann::json j;
    j["loss"] = history.history.at("loss");
    j["accuracy"] = history.history.at(history_accuracy_key(history.history));
    j["test_loss"] = tested ? nlohmann::json(test["loss"]) : nlohmann::json();
    j["test_accuracy"] = tested ? nlohmann::json(accuracy_of(test)) : nlohmann::json();
    j["replicas"] = replicas;
    j["global_batch_size"] = global_batch;
    j["steps_per_epoch"] = steps;
    j["seconds_per_epoch"] = *epoch_times;
    // The gradient all-reduce, as local replica 0 of this worker saw it: across workers when
    // there are several, else the local sum-and-update pass (0 steps with one replica in all).
    distribute::SyncStats sync = model.gradient_sync_stats();
    double sync_seconds =
        strategy.num_workers() > 1 ? sync.cross_worker_seconds : sync.local_seconds;
    j["allreduce_seconds_per_step"] =
        sync.steps ? sync_seconds / static_cast<double>(sync.steps) : 0.0;
    j["allreduce_local_seconds_per_step"] =
        sync.steps ? sync.local_seconds / static_cast<double>(sync.steps) : 0.0;
    j["allreduce_bytes_per_step"] = sync.bytes_per_step;
    j["allreduce_steps"] = sync.steps;
    j["workers"] = strategy.num_workers();
    j["local_replicas"] = strategy.num_local_replicas();
    j["input_pipeline"] = per_replica ? "per-replica" : "global";
    std::ofstream out(a.history);
    if (!out) throw NotFound("--history: cannot write '" + a.history + "'.");
    out << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

std::function<int()> add_train_command(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  auto* cmd =
      app.add_subcommand("train", "Train the seed model (784-128-10 MLP) on (Fashion-)MNIST");
  cmd->add_option("--dataset", a->dataset, "fashion_mnist or mnist")
      ->check(CLI::IsMember({"fashion_mnist", "mnist"}));
  cmd->add_option("--data-dir", a->data_dir, "Directory of the four IDX files");
  cmd->add_option(
      "--data", a->data,
      "Train on your files instead of --dataset: a directory of class folders of "
      "PNG/JPEG images, a CSV file (or glob) with a header, or a glob of TFRecord files "
      "of tf.train.Example (docs/data.md)");
  cmd->add_option("--validation-data", a->validation_data,
                  "Files of the same kind to compute the closing test loss and accuracy on");
  cmd->add_option("--label-column", a->data_options.label_column, "CSV: the label column");
  cmd->add_option("--image-feature", a->data_options.image_feature,
                  "TFRecord: the bytes feature holding the image (PNG, JPEG or raw uint8)");
  cmd->add_option("--label-feature", a->data_options.label_feature,
                  "TFRecord: the int64 label feature");
  cmd->add_option("--image-shape", a->image_shape, "TFRecord raw uint8 images: HxWxC")
      ->check(CLI::Validator(
          [&a = *a](std::string& text) -> std::string {
            a.data_options.image_shape.clear();
            size_t at = 0;
            while (at <= text.size()) {
              size_t x = text.find('x', at);
              std::string part = text.substr(at, x == std::string::npos ? x : x - at);
              if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) {
                return "--image-shape must be HxWxC, e.g. 28x28x1, got '" + text + "'";
              }
              a.data_options.image_shape.push_back(std::stoll(part));
              if (x == std::string::npos) break;
              at = x + 1;
            }
            return a.data_options.image_shape.size() == 3
                       ? ""
                       : "--image-shape must be HxWxC, e.g. 28x28x1, got '" + text + "'";
          },
          "HxWxC"));
  cmd->add_option("--auto-shard-policy", a->auto_shard_policy,
                  "--data across workers: file (each worker reads its own files), data (every "
                  "worker reads all, keeps its replicas' slices), off, or auto (file when there "
                  "are at least as many files as workers)")
      ->check(CLI::IsMember({"auto", "file", "data", "off"}));
  cmd->add_option("--cache", a->cache,
                  "--data: keep the decoded examples in memory (default), in a file at PATH, or "
                  "none (decode every epoch)");
  add_integer_option(*cmd, "--epochs", a->epochs, "Epochs", 1);
  add_integer_option(*cmd, "--batch-size", a->batch_size, "Batch size per replica", 1);
  add_integer_option(*cmd, "--global-batch-size", a->global_batch_size,
                     "Global batch size (overrides --batch-size); the replicas need not divide it",
                     1);
  add_integer_option(*cmd, "--steps-per-epoch", a->steps_per_epoch,
                     "Steps per epoch (default: a full pass)", 1);
  cmd->add_option("--precision", a->precision, "float32 or mixed_bfloat16")
      ->check(CLI::IsMember({"float32", "mixed_bfloat16"}));
  cmd->add_option("--seed", a->seed, "Random seed (weights and shuffling)")
      ->check(unsigned_integer("--seed"));
  cmd->add_option("--save-weights", a->save_weights, "Write the trained weights (safetensors)");
  cmd->add_option("--load-weights", a->load_weights, "Start from these weights (safetensors)");
  cmd->add_option("--save-model", a->save_model,
                  "Write the trained model as a Keras 3 .keras archive (architecture, weights, "
                  "optimizer state)");
  cmd->add_option("--export-onnx", a->export_onnx,
                  "Write the trained model's inference graph as ONNX (opset 17, dynamic batch)");
  auto* load_model = cmd->add_option(
      "--load-model", a->load_model,
      "Continue training the model of this .keras archive (not with --model, --load-weights or "
      "a --backup-dir holding a backup)");
  cmd->add_option("--history", a->history, "Write per-epoch metrics as JSON");
  cmd->add_option("--timeout", a->timeout,
                  "Multi-worker: seconds to wait for a lost worker before failing (0: forever)")
      ->check(number_at_least("--timeout", 0));
  cmd->add_option("--backup-dir", a->backup_dir,
                  "Back up every epoch here and resume from it after a failure");
  add_integer_option(*cmd, "--verbose", a->verbose,
                     "0 silent, 1 progress bar, 2 one line per epoch", 0, 2);
  add_integer_option(*cmd, "--replicas", a->replicas,
                     "Local replicas (default: one per available core)", 1);
  add_integer_option(*cmd, "--steps-per-execution", a->steps_per_execution,
                     "Steps each replica runs per dispatch", 1);
  auto* model_option =
      cmd->add_option("--model", a->model, model_help())->check(CLI::IsMember(model_names()));
  cmd->add_option("--learning-rate", a->learning_rate, "Adam's (initial) learning rate")
      ->check(number_at_least("--learning-rate", 0));
  cmd->add_option("--learning-rate-schedule", a->learning_rate_schedule,
                  "constant, or cosine (CosineDecay to 0 over all the steps of the run); "
                  "default: cosine for vit, constant for the other models")
      ->check(CLI::IsMember({"constant", "cosine"}));
  cmd->add_option("--gradient-dtype", a->gradient_dtype,
                  "Multi-worker: dtype gradients cross workers in; bfloat16 halves the bytes "
                  "(docs/distributed.md)")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  add_integer_option(*cmd, "--bytes-per-pack", a->bytes_per_pack,
                     "Multi-worker: gradient bucket size in bytes (default 25 MiB); with several "
                     "buckets the all-reduce overlaps the backward pass",
                     1);
  cmd->add_option("--input-pipeline", a->input_pipeline,
                  "global (one shuffled pipeline, prefetched on a host thread), per-replica (each "
                  "replica shuffles its own shard on its own thread), or auto (per-replica when "
                  "the replicas use every core)")
      ->check(CLI::IsMember({"auto", "global", "per-replica"}));
  auto* profile = cmd->add_option("--profile", a->profile,
                                  "Profile the training steps into this directory: trace.json "
                                  "(Perfetto / chrome://tracing), summary.txt, steps.svg, "
                                  "report.html (docs/profiling.md)");
  cmd->add_option("--profile-steps", a->profile_steps,
                  "Steps to profile, A:B, counted from 1 (default: 2 to the end)")
      ->check(profile_steps(*a))
      ->needs(profile);
  return [a, model_option, load_model] {
    TrainArgs args = *a;
    args.model_given = model_option->count() > 0;
    check_load_model(args, load_model->count() > 0);
    const Environment env = Environment::process();
    // The cluster as `lockstep devices` resolves it (MPI launcher, else SLURM, else TF_CONFIG,
    // else this host): a malformed description, or one of several workers that MPI did not
    // launch, stops here with its error rather than training alone.
    if (!has_mpi_environment(env)) {
      auto resolver = resolve_cluster(env, LocalDeviceOptions{.num_replicas = args.replicas});
      check_cluster_can_connect(*resolver, env);
      return run_train(args, *resolver);
    }
    // One worker of an MPI job: only the chief (rank 0) reports and writes files, and any error
    // ends the whole job, so that survivors of a lost worker exit non-zero instead of waiting.
    try {
      auto resolver = resolve_cluster(env, LocalDeviceOptions{.num_replicas = args.replicas});
      if (resolver->worker_index() != 0) {
        args.verbose = 0;
        args.save_weights.clear();
        args.save_model.clear();
        args.export_onnx.clear();
        args.history.clear();
      }
      return run_train(args, *resolver);
    } catch (const std::exception& e) {
      distribute::abort_job(e);
    }
  };
}

}  // namespace lockstep::apps
