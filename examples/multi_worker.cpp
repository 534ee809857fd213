// The seed program on several processes: tf.distribute's multi-worker tutorial in C++.
//
//   mpirun -np 2 examples/multi_worker                       # Fashion-MNIST, 5 epochs
//   mpirun -np 2 examples/multi_worker --synthetic --steps 5 --epochs 2 --checksum
//
// Every process runs this same program. MultiWorkerMirroredStrategy finds the cluster from the
// launcher's environment (one worker per MPI rank; each drives LOCKSTEP_DEVICES=cpu:N local
// replicas, default one per available core) and keeps every worker's weights identical. Started
// without mpirun it is one worker, i.e. MirroredStrategy. The global batch is 128 per replica in
// sync; each worker reads the same global batches and trains on its own slice of them. Only the
// chief (worker 0) prints, except --checksum, which every worker prints so that a launcher script
// can check they ended with the same weights. Any error ends the whole job (abort_job), so that
// the other workers fail at once instead of waiting in a collective for a worker that is gone.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>

#include "lockstep/lockstep.h"

using namespace lockstep;
using namespace lockstep::keras;

namespace {

// uint8 images [B, 28, 28] and labels [B] -> float32 [B, 784] in [0, 1] and one-hot [B, 10].
Element preprocess(const Element& batch) {
  Tensor x = batch[0].to(DType::float32).reshape({-1, 784});
  float* d = x.data<float>();
  for (int64_t i = 0; i < x.num_elements(); ++i) d[i] *= 1.0f / 255.0f;
  return {x, one_hot(batch[1].to(DType::int64), 10)};
}

// Fashion-MNIST-shaped images from a closed-form expression (no download, the same in every
// process): each class has its own stripe pattern, so the model has something to learn.
datasets::Split synthetic_images(int64_t n) {
  Tensor x = Tensor::zeros({n, 28, 28}, DType::uint8);
  Tensor y = Tensor::zeros({n}, DType::uint8);
  uint8_t* xd = x.data<uint8_t>();
  uint8_t* yd = y.data<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = (i * 7) % 10;
    yd[i] = static_cast<uint8_t>(label);
    for (int64_t p = 0; p < 784; ++p) {
      const int64_t row = p / 28, col = p % 28;
      const bool on = (row + label * col) % (label + 2) == 0;
      xd[i * 784 + p] = static_cast<uint8_t>((on ? 200 : 20) + (i * 13 + p) % 40);
    }
  }
  return {x, y};
}

// FNV-1a over the bytes of every weight: equal on two workers exactly when their weights are.
uint64_t weights_checksum(Model& model) {
  uint64_t h = 1469598103934665603ull;
  for (const Variable& v : model.weights()) {
    Tensor t = v.raw_value();
    const auto* p = static_cast<const unsigned char*>(t.raw_data());
    for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

struct Args {
  bool synthetic = false;
  bool checksum = false;
  int epochs = 5;
  int64_t steps = 0;  // per epoch; 0: one pass over the 60000 training images
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw InvalidArgument(arg + " needs a value.");
      return argv[++i];
    };
    if (arg == "--synthetic") {
      a.synthetic = true;
    } else if (arg == "--checksum") {
      a.checksum = true;
    } else if (arg == "--steps") {
      a.steps = std::stoll(value());
    } else if (arg == "--epochs") {
      a.epochs = std::stoi(value());
    } else {
      throw InvalidArgument("multi_worker: unknown argument '" + arg +
                            "'. Usage: multi_worker [--synthetic] [--steps N] [--epochs E] "
                            "[--checksum]");
    }
  }
  return a;
}

int run(int argc, char** argv) {
  const Args args = parse(argc, argv);
  distribute::MultiWorkerMirroredStrategy strategy({.timeout_seconds = 60});
  const bool chief = strategy.is_chief();
  if (chief) {
    std::cout << strategy.num_workers() << " worker(s), " << strategy.num_replicas_in_sync()
              << " replicas in sync\n";
  }
  const int64_t GLOBAL_BATCH = 128 * strategy.num_replicas_in_sync();

  auto [train, test] = args.synthetic
                           ? datasets::TrainTest{synthetic_images(4096), synthetic_images(1024)}
                           : datasets::fashion_mnist::load_data();
  const int64_t train_size = train.first.dim(0);
  // Every worker builds the same pipeline (same shuffle seed): the strategy gives each worker its
  // slice of every global batch.
  Dataset dataset = Dataset::from_tensor_slices({train.first, train.second})
                        .shuffle(train_size, /*seed=*/1)
                        .repeat()
                        .batch(GLOBAL_BATCH)  // batch BEFORE distributing
                        .map(preprocess)
                        .prefetch(Dataset::AUTOTUNE);
  const int64_t steps = args.steps > 0 ? args.steps : train_size / GLOBAL_BATCH;

  auto scope = strategy.scope();  // model + optimizer inside scope
  Sequential model({
      Input({784}),
      layers::Dense({.units = 128, .activation = "relu"}),
      layers::Dense({.units = 10, .activation = "softmax"}),
  });
  model.compile({.optimizer = optimizers::Adam(),
                 .loss = losses::CategoricalCrossentropy(),
                 .metrics = {metrics::CategoricalAccuracy()}});
  // The reported loss and accuracy are global (all workers' examples); the chief shows them.
  model.fit(dataset, {.epochs = args.epochs, .steps_per_epoch = steps, .verbose = chief ? 2 : 0});

  Dataset test_ds =
      Dataset::from_tensor_slices({test.first, test.second}).batch(GLOBAL_BATCH).map(preprocess);
  auto results = model.evaluate(test_ds);  // collective too: every worker evaluates
  if (chief) {
    std::cout << "test loss: " << results["loss"]
              << " - test accuracy: " << results["categorical_accuracy"] << "\n";
  }
  if (args.checksum) {
    char line[96];
    std::snprintf(line, sizeof line, "worker %d weights checksum %016llx\n",
                  strategy.worker_index(),
                  static_cast<unsigned long long>(weights_checksum(model)));
    std::cout << line << std::flush;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    distribute::abort_job(e);  // ends every process of the job, with this message
  }
}
