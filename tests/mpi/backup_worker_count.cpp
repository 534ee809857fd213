// A BackupAndRestore backup resumed on another number of workers (run_backup_worker_count.sh
// drives it under mpirun and alone). Every process builds MultiWorkerMirroredStrategy, which is
// one worker with LOCKSTEP_DEVICES replicas when started without a launcher.
//
//   backup_worker_count write  DIR EPOCHS PIPELINE       fit EPOCHS epochs, keep the backup
//   backup_worker_count resume DIR EPOCHS PIPELINE OUT   fit to EPOCHS with BackupAndRestore(DIR)
//   backup_worker_count full   -   EPOCHS PIPELINE OUT   fit EPOCHS epochs, no backup
//
// PIPELINE is "global" (experimental_distribute_dataset of global batches), "per-replica"
// (one shuffled shard per replica, as `lockstep train --input-pipeline per-replica`) or "file"
// (the examples in 4 CSV files that each process writes for itself under DIR, sharded by file
// across workers: AutoShardPolicy::FILE, sparse labels). The model
// has a Dropout layer, so the backup's per-replica random streams must carry over too. The chief
// writes the final weights to OUT (safetensors) and the epoch fit resumed after to OUT.restored.
// Errors print one line and exit 3 (alone) or end the job (under mpirun).
#include <unistd.h>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "lockstep/lockstep.h"

using namespace lockstep;

namespace {

constexpr int64_t kExamples = 96, kFeatures = 6, kClasses = 3, kGlobalBatch = 16;

Element synthetic_data() {
  Tensor x = Tensor::zeros({kExamples, kFeatures});
  Tensor y = Tensor::zeros({kExamples, kClasses});
  float* xd = x.data<float>();
  float* yd = y.data<float>();
  for (int64_t i = 0; i < kExamples; ++i) {
    double s = 0;
    for (int64_t j = 0; j < kFeatures; ++j) {
      double v = std::cos(0.53 * double(i + 2) * double(j + 1)) - 0.05 * double(j);
      xd[i * kFeatures + j] = static_cast<float>(v);
      s += v * double(j % 3 ? 1 : -2);
    }
    yd[i * kClasses + (s < -0.4 ? 0 : (s < 0.6 ? 1 : 2))] = 1.0f;
  }
  return {x, y};
}

// The examples as 4 CSV files (features f0.., then the class index), in a directory of this
// process's own; returns its glob.
std::string write_csv_shards(const Element& data, const std::string& dir) {
  const std::string files = dir + "/csv-" + std::to_string(::getpid());
  std::filesystem::create_directories(files);
  for (int j = 0; j < 4; ++j) {
    std::ofstream f(files + "/part-" + std::to_string(j) + ".csv");
    for (int64_t c = 0; c < kFeatures; ++c) f << "f" << c << ",";
    f << "label\n";
    f.precision(9);
    for (int64_t i = j; i < kExamples; i += 4) {
      for (int64_t c = 0; c < kFeatures; ++c) f << data[0].data<float>()[i * kFeatures + c] << ",";
      int64_t label = 0;
      while (data[1].data<float>()[i * kClasses + label] == 0.0f) ++label;
      f << label << "\n";
    }
  }
  return files + "/part-*.csv";
}

int run(const std::string& mode, const std::string& dir, int epochs, const std::string& pipeline,
        const std::string& out) {
  keras::set_random_seed(77);
  distribute::MultiWorkerMirroredStrategy strategy({.timeout_seconds = 60});
  const Element data = synthetic_data();
  std::optional<distribute::DistributedDataset> input;
  if (pipeline == "file") {
    const std::string pattern = write_csv_shards(data, dir);
    Dataset csv = make_csv_dataset(pattern, {.batch_size = kGlobalBatch / strategy.num_workers(),
                                             .label_name = "label",
                                             .shuffle_seed = 5})
                      .dataset;
    input = strategy.experimental_distribute_dataset(csv, distribute::AutoShardPolicy::FILE);
  } else if (pipeline == "global") {
    input = strategy.experimental_distribute_dataset(
        Dataset::from_tensor_slices(data).shuffle(kExamples, 5).repeat().batch(kGlobalBatch));
  } else {
    input = strategy.distribute_datasets_from_function(
        [&](const distribute::InputContext& ctx) {
          return Dataset::from_tensor_slices(data)
              .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
              .shuffle(kExamples, 5)
              .repeat()
              .batch(ctx.get_per_replica_batch_size(kGlobalBatch));
        },
        {.experimental_replication_mode = distribute::InputReplicationMode::PER_REPLICA});
  }
  auto scope = strategy.scope();
  keras::Sequential model({keras::Input({kFeatures}),
                           keras::layers::Dense({.units = 12, .activation = "relu"}),
                           keras::layers::Dropout(0.3),
                           keras::layers::Dense({.units = kClasses, .activation = "softmax"})});
  if (pipeline == "file") {
    model.compile({.optimizer = keras::optimizers::Adam(),
                   .loss = keras::losses::SparseCategoricalCrossentropy()});
  } else {
    model.compile(
        {.optimizer = keras::optimizers::Adam(), .loss = keras::losses::CategoricalCrossentropy()});
  }
  std::vector<std::shared_ptr<keras::callbacks::Callback>> callbacks;
  std::shared_ptr<keras::callbacks::BackupAndRestore> backup;
  if (mode != "full") {
    backup = std::make_shared<keras::callbacks::BackupAndRestore>(
        dir, /*delete_checkpoint=*/mode == "resume");
    callbacks.push_back(backup);
  }
  // 4 steps per epoch over passes of 6 global batches: epochs end mid-pass.
  model.fit(*input, {.epochs = epochs, .steps_per_epoch = 4, .verbose = 0, .callbacks = callbacks});
  if (mode != "write" && strategy.worker_index() == 0) {
    model.save_weights(out);
    std::ofstream(out + ".restored") << (backup ? backup->restored_epoch() : -1) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto& mpi = distribute::mpi_initialize(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (argc < 5 || (mode != "write" && mode != "resume" && mode != "full") ||
      (mode != "write" && argc < 6)) {
    std::cerr << "usage: backup_worker_count write|resume|full DIR EPOCHS "
                 "global|per-replica|file [OUT]\n";
    return 2;
  }
  try {
    return run(mode, argv[2], std::atoi(argv[3]), argv[4], argc > 5 ? argv[5] : "");
  } catch (const std::exception& e) {
    if (mpi.launched_by_mpirun()) distribute::abort_job(e);
    std::cerr << "backup_worker_count: " << e.what() << "\n";
    return 3;
  }
}
