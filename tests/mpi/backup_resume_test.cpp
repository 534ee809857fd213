// Resume after a failure (single process): training killed (SIGKILL) after epoch 2 of 4 and
// restarted with BackupAndRestore ends with weights byte-identical to an uninterrupted run (also
// with a Dropout layer, whose mask streams the backup restores); a
// leftover partial temporary file is ignored, and a corrupt backup is refused (DataLoss), never
// used. Every training runs in a forked child so that a kill ends it exactly as in production.
// The parent learns that epoch 2's backup is on disk from a pipe the child writes after
// BackupAndRestore::on_epoch_end returned (callbacks run in order) — no sleeps.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "lockstep/lockstep.h"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

constexpr int kEpochs = 4;
constexpr int kExitDataLoss = 3;

struct Variant {
  const char* name;
  bool repeat;  // repeat() + steps_per_epoch (one iterator spans epochs) vs a finite dataset
  // A Dropout layer: resumption must also restore each replica's mask stream (and the global
  // generator), saved in the backup's metadata.
  bool dropout = false;
};

Element synthetic_data() {
  constexpr int64_t n = 96, f = 6, classes = 3;
  Tensor x = Tensor::zeros({n, f});
  Tensor y = Tensor::zeros({n, classes});
  float* xd = x.data<float>();
  float* yd = y.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t j = 0; j < f; ++j) {
      double v = std::cos(0.53 * double(i + 2) * double(j + 1)) - 0.05 * double(j);
      xd[i * f + j] = static_cast<float>(v);
      s += v * double(j % 3 ? 1 : -2);
    }
    yd[i * classes + (s < -0.4 ? 0 : (s < 0.6 ? 1 : 2))] = 1.0f;
  }
  return {x, y};
}

// Trains kEpochs with BackupAndRestore(dir) on 2 replicas and writes the final weights' bytes to
// `out`. When notify_fd >= 0, after the backup of epoch index 1 (the 2nd epoch) it writes one byte
// to notify_fd and blocks until killed.
void train(const Variant& v, const std::string& dir, const std::string& out, int notify_fd) {
  keras::set_random_seed(77);
  distribute::MirroredStrategy strategy(2);
  auto scope = strategy.scope();
  // Reshuffled every epoch (and, with repeat, every pass): resumption must restore the order.
  Dataset ds = Dataset::from_tensor_slices(synthetic_data()).shuffle(96, 5);
  ds = v.repeat ? ds.repeat().batch(16) : ds.batch(16);
  keras::Sequential model({
      keras::Input({6}),
      keras::layers::Dense({.units = 12, .activation = "relu"}),
  });
  if (v.dropout) model.add(keras::layers::Dropout(0.3));
  model.add(keras::layers::Dense({.units = 3, .activation = "softmax"}));
  model.compile(
      {.optimizer = keras::optimizers::Adam(), .loss = keras::losses::CategoricalCrossentropy()});
  auto backup = std::make_shared<keras::callbacks::BackupAndRestore>(dir);
  auto killer = std::make_shared<keras::callbacks::LambdaCallback>(
      keras::callbacks::LambdaCallbackOptions{.on_epoch_end = [notify_fd](int epoch, const auto&) {
        if (notify_fd < 0 || epoch != 1) return;
        char c = 'x';
        if (write(notify_fd, &c, 1) != 1) std::_Exit(4);
        for (;;) pause();  // the parent kills us here, after the backup was written
      }});
  // 4 steps per epoch over passes of 6 batches: epochs end mid-pass.
  model.fit(ds, {.epochs = kEpochs,
                 .steps_per_epoch = v.repeat ? 4 : 0,
                 .verbose = 0,
                 .callbacks = {backup, killer}});
  std::ofstream f(out, std::ios::binary);
  for (const Variable& w : model.weights()) {
    const Tensor& t = w.raw_value();
    f.write(static_cast<const char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
  }
  if (!f) std::_Exit(5);
  // Written last, so its presence proves the run resumed (and did not start afresh).
  std::ofstream(out + ".restored") << backup->restored_epoch() << "\n";
}

// Runs train() in a child; returns its exit status (or kills it once it reports epoch 2).
int in_child(const Variant& v, const std::string& dir, const std::string& out, bool kill_after) {
  std::cout.flush();  // the child must not inherit (and repeat) buffered output
  int fds[2];
  if (pipe(fds) != 0) throw Unavailable("pipe failed");
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    try {
      train(v, dir, out, kill_after ? fds[1] : -1);
    } catch (const DataLoss& e) {
      std::cerr << "child: DataLoss: " << e.what() << "\n";
      std::_Exit(kExitDataLoss);
    } catch (const std::exception& e) {
      std::cerr << "child: " << e.what() << "\n";
      std::_Exit(1);
    }
    std::_Exit(0);
  }
  close(fds[1]);
  if (kill_after) {
    char c;
    ssize_t got = read(fds[0], &c, 1);  // blocks until the child's epoch-2 backup is on disk
    kill(pid, SIGKILL);
    if (got != 1) std::cerr << "child ended before reporting epoch 2\n";
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

int failures = 0;
void check(bool ok, const std::string& what) {
  std::cout << (ok ? "ok   " : "FAIL ") << what << "\n";
  if (!ok) ++failures;
}

void run_variant(const Variant& v, const fs::path& root) {
  std::cout << "--- " << v.name << "\n";
  fs::path base = root / v.name;
  fs::create_directories(base);
  const std::string full = (base / "uninterrupted.bin").string();
  const std::string resumed = (base / "resumed.bin").string();
  const fs::path dir_full = base / "backup_full", dir = base / "backup";

  check(in_child(v, dir_full.string(), full, false) == 0, "uninterrupted 4-epoch run succeeds");
  check(!fs::exists(dir_full / "backup.safetensors"), "the backup is deleted when training ends");

  check(in_child(v, dir.string(), resumed, true) == 128 + SIGKILL, "run killed after epoch 2");
  const fs::path backup = dir / "backup.safetensors";
  check(fs::exists(backup) && !fs::exists(resumed), "epoch 2's backup exists, no final weights");

  // A corrupt (truncated) backup is refused, not used, and not silently replaced.
  const fs::path dir_bad = base / "backup_truncated";
  fs::create_directories(dir_bad);
  std::string bytes = slurp(backup.string());
  std::ofstream(dir_bad / "backup.safetensors", std::ios::binary)
      << bytes.substr(0, bytes.size() / 2);
  check(in_child(v, dir_bad.string(), (base / "bad.bin").string(), false) == kExitDataLoss,
        "a truncated backup makes fit fail with DataLoss");
  check(!fs::exists(base / "bad.bin"), "no training ran from the truncated backup");

  // What a kill during a write leaves behind: a partial temporary file next to the good backup.
  std::ofstream(dir / "backup.safetensors.tmp.99999.0", std::ios::binary)
      << bytes.substr(0, bytes.size() / 3);
  check(in_child(v, dir.string(), resumed, false) == 0, "restarted run succeeds");
  check(slurp(resumed + ".restored") == "1\n", "it resumed after epoch 2 (index 1)");
  std::string a = slurp(full), b = slurp(resumed);
  check(!a.empty() && a == b, "final weights are byte-identical to the uninterrupted run");
  check(!fs::exists(backup), "the backup is deleted when the resumed training ends");
}

}  // namespace

int main() {
  fs::path root =
      fs::temp_directory_path() / ("lockstep_backup_resume_" + std::to_string(getpid()));
  fs::create_directories(root);
  for (const Variant& v : {Variant{"finite_dataset", false},
                           Variant{"repeat_steps_per_epoch", true}, Variant{"dropout", true, true}})
    run_variant(v, root);
  fs::remove_all(root);
  std::cout << (failures ? "FAILED" : "PASS") << "\n";
  return failures ? 1 : 0;
}
