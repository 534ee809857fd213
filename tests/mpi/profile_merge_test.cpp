// mpirun -np 2 profile_merge_test DIR: both workers train a few steps under callbacks::Profiler,
// with small gradient buckets so that the all-reduce overlaps backward on a communication thread.
// The chief then reads DIR/trace.json (nlohmann-json): one file holding both workers, as processes
// pid 0 and pid 1, each with its steps on its host track and its communication thread; the other
// worker got no summary and wrote nothing. Exit status 0 when every check holds.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "lockstep/lockstep.h"

using namespace lockstep;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << "FAIL: " << what << "\n";
    ++failures;
  }
}

Element synthetic_data() {
  const int64_t n = 96, features = 6, classes = 3;
  Tensor x = Tensor::zeros({n, features});
  Tensor y = Tensor::zeros({n, classes});
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t j = 0; j < features; ++j) {
      const double v = std::sin(0.37 * double(i + 1) * double(j + 1));
      x.data<float>()[i * features + j] = static_cast<float>(v);
      s += v;
    }
    y.data<float>()[i * classes + (s < -0.5 ? 0 : s < 0.5 ? 1 : 2)] = 1.0f;
  }
  return {x, y};
}

void check_trace(const std::filesystem::path& dir) {
  std::ifstream f(dir / "trace.json");
  check(static_cast<bool>(f), "the chief wrote " + (dir / "trace.json").string());
  if (!f) return;
  const nlohmann::json j = nlohmann::json::parse(f);
  std::map<int, std::string> processes;
  std::map<std::pair<int, int>, std::string> threads;
  std::map<int, std::set<std::string>> steps;
  std::map<int, int> all_reduce_on_comm;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "process_name")
      processes[e.at("pid")] = e.at("args").at("name");
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      threads[{e.at("pid"), e.at("tid")}] = e.at("args").at("name");
  }
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const int pid = e.at("pid");
    const std::string name = e.at("name");
    if (name.rfind("step ", 0) == 0) steps[pid].insert(name);
    if (name == "all_reduce" && threads[{pid, e.at("tid")}] == "communication")
      ++all_reduce_on_comm[pid];
  }
  check(processes == std::map<int, std::string>{{0, "worker 0 (chief)"}, {1, "worker 1"}},
        "one process per worker, named (got " + std::to_string(processes.size()) + ")");
  const std::set<std::string> expected = {"step 2", "step 3", "step 4", "step 5", "step 6"};
  for (int pid : {0, 1}) {
    check(steps[pid] == expected, "worker " + std::to_string(pid) + " has steps 2 to 6 (got " +
                                      std::to_string(steps[pid].size()) + ")");
    check(all_reduce_on_comm[pid] >= 5,
          "worker " + std::to_string(pid) + " all-reduced buckets on its communication thread");
  }
  check(j.at("otherData").at("workers") == 2, "otherData names 2 workers");
  std::ifstream summary(dir / "summary.txt");
  const std::string text{std::istreambuf_iterator<char>(summary), {}};
  check(text.find("on 2 worker(s)") != std::string::npos, "summary.txt covers both workers");
  check(text.find("[communication, ") != std::string::npos,
        "summary.txt has a communication verdict");
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 2) {
    std::cerr << "usage: mpirun -np 2 profile_merge_test DIR\n";
    return 2;
  }
  distribute::mpi_initialize(&argc, &argv);
  // 256-byte buckets: the model's gradients form several, which cross workers during backward.
  distribute::MultiWorkerMirroredStrategy strategy({.timeout_seconds = 60, .bytes_per_pack = 256});
  const std::filesystem::path dir = argv[1];
  if (strategy.is_chief()) std::filesystem::remove_all(dir);
  keras::set_random_seed(7);
  Dataset ds = Dataset::from_tensor_slices(synthetic_data()).batch(16);
  auto scope = strategy.scope();
  keras::Sequential model({keras::Input({6}),
                           keras::layers::Dense({.units = 16, .activation = "relu"}),
                           keras::layers::Dense({.units = 3, .activation = "softmax"})});
  model.compile(
      {.optimizer = keras::optimizers::Adam(), .loss = keras::losses::CategoricalCrossentropy()});
  auto profile = std::make_shared<keras::callbacks::Profiler>(
      keras::callbacks::ProfilerOptions{.log_dir = dir.string(), .first_step = 2, .last_step = 6});
  model.fit(ds, {.epochs = 1, .verbose = 0, .callbacks = {profile}});
  if (strategy.is_chief()) {
    check(profile->summary().has_value() && profile->summary()->workers == 2,
          "the chief's summary covers 2 workers");
    check_trace(dir);
  } else {
    check(!profile->summary().has_value(), "only the chief gets the summary");
  }
  std::cout << "worker " << strategy.worker_index() << ": " << (failures ? "FAIL" : "PASS") << "\n";
  return failures ? 1 : 0;
} catch (const std::exception& e) {
  std::cerr << "FAIL: " << e.what() << "\n";
  distribute::abort_job(e);
}
