// callbacks::Profiler and the custom-loop profiler API over real training: the files it writes,
// a trace.json in Trace Event Format (parsed here with nlohmann-json) with one track per pool
// thread, spans that nest on every track, steps whose spans account for their wall time, and an
// input verdict that follows the input share the trace shows.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "distribute/step/task_pool.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/core/cpu_cores.h"
#include "lockstep/core/profiler.h"
#include "lockstep/distribute/distributed_dataset.h"
#include "lockstep/distribute/input_context.h"
#include "lockstep/distribute/profiler.h"
#include "lockstep/distribute/strategies.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/keras/callbacks.h"
#include "lockstep/keras/layers.h"
#include "lockstep/keras/losses.h"
#include "lockstep/keras/metrics.h"
#include "lockstep/keras/optimizers.h"
#include "lockstep/keras/sequential.h"
#include "testing/classification_data.h"

namespace lockstep::keras {
namespace {

namespace fs = std::filesystem;
using distribute::Severity;

constexpr int64_t kInputs = 256, kHidden = 512, kClasses = 10;

distribute::StrategyConfig config(int replicas, int threads) {
  distribute::StrategyConfig c;
  c.name = "Test";
  c.replica_cores.assign(static_cast<size_t>(replicas), {});
  c.num_threads = threads;
  return c;
}

Sequential mlp() {
  return Sequential({Input({kInputs}), layers::Dense({.units = kHidden, .activation = "relu"}),
                     layers::Dense({.units = kClasses, .activation = "softmax"})});
}

void compile(Sequential& model) {
  model.compile({.optimizer = optimizers::Adam(),
                 .loss = losses::CategoricalCrossentropy(),
                 .metrics = {metrics::CategoricalAccuracy()}});
}

class ProfilerFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lockstep_profiler_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override {
    if (profiler::recording()) profiler::stop();
    // A failing test leaves its profile to look at.
    if (HasFailure()) {
      std::cerr << "profile kept in " << dir_ << "\n";
    } else {
      fs::remove_all(dir_);
    }
  }
  std::string read(const std::string& name) const {
    std::ifstream f(dir_ / name);
    return {std::istreambuf_iterator<char>(f), {}};
  }
  nlohmann::json trace() const { return nlohmann::json::parse(read("trace.json")); }

  // Fits `steps` steps of the MLP on `dist`, profiling steps [first, last].
  distribute::ProfileSummary fit_profiled(distribute::Strategy& strategy,
                                          const distribute::DistributedDataset& dist, int64_t steps,
                                          int64_t first, int64_t last,
                                          int steps_per_execution = 1) {
    auto scope = strategy.scope();
    Sequential model = mlp();
    model.compile({.optimizer = optimizers::Adam(),
                   .loss = losses::CategoricalCrossentropy(),
                   .metrics = {metrics::CategoricalAccuracy()},
                   .steps_per_execution = steps_per_execution});
    auto cb = std::make_shared<callbacks::Profiler>(callbacks::ProfilerOptions{
        .log_dir = dir_.string(), .first_step = first, .last_step = last, .print_summary = false});
    model.fit(dist, {.epochs = 1, .steps_per_epoch = steps, .verbose = 0, .callbacks = {cb}});
    EXPECT_FALSE(profiler::recording());
    EXPECT_TRUE(cb->summary().has_value());
    return cb->summary().value_or(distribute::ProfileSummary{});
  }

  fs::path dir_;
};

Dataset random_dataset(int64_t global_batch, uint64_t seed) {
  testing::ClassificationData d =
      testing::random_classification(8 * global_batch, kInputs, kClasses, seed);
  return Dataset::from_tensor_slices({d.x, d.y})
      .shuffle(8 * global_batch, seed)
      .repeat()
      .batch(global_batch);
}

struct Event {
  std::string name;
  int pid = 0, tid = 0;
  int64_t ts_ns = 0, dur_ns = 0;  // exact: the file has three decimals of microseconds
  int64_t step = 0;
  int replica = 0;
  bool backup = false;
};

std::vector<Event> spans_of(const nlohmann::json& trace) {
  std::vector<Event> out;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    Event ev;
    ev.name = e.at("name");
    ev.pid = e.at("pid");
    ev.tid = e.at("tid");
    ev.ts_ns = std::llround(e.at("ts").get<double>() * 1000);
    ev.dur_ns = std::llround(e.at("dur").get<double>() * 1000);
    ev.step = e.at("args").at("step");
    ev.replica = e.at("args").at("replica");
    ev.backup = e.at("args").at("backup");
    out.push_back(ev);
  }
  return out;
}

// Events of one track, parents first: earlier begin, then longer.
std::map<std::pair<int, int>, std::vector<Event>> by_track(const std::vector<Event>& events) {
  std::map<std::pair<int, int>, std::vector<Event>> out;
  for (const Event& e : events) out[{e.pid, e.tid}].push_back(e);
  for (auto& [k, v] : out) {
    std::stable_sort(v.begin(), v.end(), [](const Event& a, const Event& b) {
      return a.ts_ns != b.ts_ns ? a.ts_ns < b.ts_ns : a.dur_ns > b.dur_ns;
    });
  }
  return out;
}

std::map<std::pair<int, int>, std::string> thread_names(const nlohmann::json& trace) {
  std::map<std::pair<int, int>, std::string> out;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      out[{e.at("pid"), e.at("tid")}] = e.at("args").at("name");
  return out;
}

// Holds each thread of the pool at its replica task until all three have one: every thread runs
// one replica per step (on a busy machine the caller could otherwise run them all while the other
// threads wait for a core). A test hook, not a sleep.
class OneReplicaPerThread {
 public:
  explicit OneReplicaPerThread(distribute::TaskPool& pool) : pool_(pool) {
    pool_.set_run_hook([this](int kind, int, int, bool backup, uint64_t) {
      if (kind != 0 || backup) return;
      std::unique_lock lock(mu_);
      const int64_t round = arrived_++ / 3;
      cv_.notify_all();
      cv_.wait(lock, [&] { return arrived_ >= 3 * (round + 1); });
    });
  }
  ~OneReplicaPerThread() { pool_.set_run_hook({}); }

 private:
  distribute::TaskPool& pool_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t arrived_ = 0;
};

TEST_F(ProfilerFiles, FitWritesTheFourFilesAndATraceEventFormatTrace) {
  distribute::Strategy strategy(config(3, 3));
  auto dist = strategy.experimental_distribute_dataset(random_dataset(3 * 64, 1));
  OneReplicaPerThread hold(strategy.task_pool());
  const distribute::ProfileSummary s = fit_profiled(strategy, dist, 12, 2, 11);
  for (const char* f : {"trace.json", "summary.txt", "steps.svg", "report.html"})
    EXPECT_TRUE(fs::is_regular_file(dir_ / f)) << f;
  EXPECT_EQ(s.steps, 10);
  EXPECT_EQ(s.first_step, 2);
  EXPECT_EQ(s.last_step, 11);
  EXPECT_EQ(read("summary.txt"), distribute::format_summary(s));

  const nlohmann::json j = trace();
  ASSERT_TRUE(j.at("traceEvents").is_array());
  for (const auto& e : j.at("traceEvents")) {
    const std::string ph = e.at("ph");
    ASSERT_TRUE(ph == "X" || ph == "M") << e.dump();
    EXPECT_TRUE(e.at("pid").is_number_integer()) << e.dump();
    EXPECT_TRUE(e.at("name").is_string()) << e.dump();
    if (ph == "X") {
      EXPECT_TRUE(e.at("tid").is_number_integer()) << e.dump();
      EXPECT_TRUE(e.at("ts").is_number()) << e.dump();
      EXPECT_GE(e.at("dur").get<double>(), 0.0) << e.dump();
    }
  }
  // One process (this worker), one named track per pool thread, and every span on one of them.
  // The pool's busy-machine extra (thread 3, when three threads fill the machine's cores) has a
  // track too if the machine was busy during the run (another test running beside it).
  ASSERT_EQ(strategy.task_pool().total_threads(), available_core_count() <= 3 ? 4 : 3);
  std::set<std::string> names;
  for (const auto& [key, name] : thread_names(j)) {
    EXPECT_EQ(key.first, 0);
    names.insert(name);
  }
  names.erase("pool thread 3");
  EXPECT_EQ(names,
            (std::set<std::string>{"host / pool thread 0", "pool thread 1", "pool thread 2"}));
  const auto named = thread_names(j);
  const std::vector<Event> spans = spans_of(j);
  for (const Event& e : spans) EXPECT_EQ(named.count({e.pid, e.tid}), 1u) << e.name;
  // Every profiled step ran each replica's task; its forward and backward carry the replica.
  for (int64_t step = 2; step <= 11; ++step) {
    std::set<int> replicas, forward;
    for (const Event& e : spans) {
      if (e.step != step) continue;
      if (e.name == "replica" || e.name == "replica (backup)") replicas.insert(e.replica);
      if (e.name == "forward" || e.name == "forward (backup)") forward.insert(e.replica);
    }
    EXPECT_EQ(replicas, (std::set<int>{0, 1, 2})) << "step " << step;
    EXPECT_EQ(forward, (std::set<int>{0, 1, 2})) << "step " << step;
  }
}

TEST_F(ProfilerFiles, SpansNestOnEveryTrackAndAStepsSpansAccountForItsWallTime) {
  distribute::Strategy strategy(config(2, 2));
  auto dist = strategy.experimental_distribute_dataset(random_dataset(2 * 128, 2));
  const distribute::ProfileSummary s = fit_profiled(strategy, dist, 42, 3, 42);
  const auto tracks = by_track(spans_of(trace()));
  const auto names = thread_names(trace());
  int64_t wall = 0, covered = 0;
  std::vector<double> per_step;
  for (const auto& [key, events] : tracks) {
    // A stack of open spans: each span lies inside the one on top, or after it.
    std::vector<const Event*> open;
    for (const Event& e : events) {
      while (!open.empty() && open.back()->ts_ns + open.back()->dur_ns <= e.ts_ns &&
             !(e.dur_ns == 0 && open.back()->ts_ns + open.back()->dur_ns == e.ts_ns))
        open.pop_back();
      if (!open.empty()) {
        const Event& top = *open.back();
        ASSERT_LE(e.ts_ns + e.dur_ns, top.ts_ns + top.dur_ns)
            << e.name << " at " << e.ts_ns << " overlaps " << top.name << " at " << top.ts_ns
            << " partially on " << names.at(key);
      }
      open.push_back(&e);
    }
    if (names.at(key) != "host / pool thread 0") continue;
    // The host's steps: the time their direct children cover (each child's whole span).
    for (size_t i = 0; i < events.size(); ++i) {
      if (events[i].name.rfind("step ", 0) != 0) continue;
      const int64_t end = events[i].ts_ns + events[i].dur_ns;
      int64_t children = 0, child_end = events[i].ts_ns;
      for (size_t k = i + 1; k < events.size() && events[k].ts_ns < end; ++k) {
        if (events[k].ts_ns < child_end) continue;  // inside the previous child
        children += events[k].dur_ns;
        child_end = events[k].ts_ns + events[k].dur_ns;
      }
      EXPECT_LE(children, events[i].dur_ns);
      wall += events[i].dur_ns;
      covered += children;
      per_step.push_back(static_cast<double>(children) / static_cast<double>(events[i].dur_ns));
    }
  }
  ASSERT_EQ(per_step.size(), 40u);
  // The phases of a step sum to within 5% of its wall time. A thread the OS deschedules between
  // two spans leaves that time untraced (on a busy machine, milliseconds at a time, in a few
  // steps): 36 of the 40 steps must be covered, not every one.
  const auto covered_steps =
      std::count_if(per_step.begin(), per_step.end(), [](double c) { return c >= 0.95; });
  EXPECT_GE(covered_steps, 36) << "covered " << covered << " ns of " << wall << " in all";
  // The summary's rows add up to the step time.
  double rows = 0;
  for (const distribute::PhaseRow& r : s.phases) rows += r.mean_ms;
  EXPECT_NEAR(rows, s.step_mean_ms, 1e-9 * s.step_mean_ms + 1e-12);
  EXPECT_NEAR(s.step_mean_ms * 1e6 * static_cast<double>(s.steps), static_cast<double>(wall),
              1e-6 * static_cast<double>(wall));
}

// The workload of a slow pipeline: a map function that blocks for `ms` per batch — times
// LOCKSTEP_TEST_SLOWDOWN, how much slower than a native CPU this build's steps run (a cross build
// runs its tests in QEMU's user mode: tests/CMakeLists.txt), so that input stays the larger share.
#ifndef LOCKSTEP_TEST_SLOWDOWN
#define LOCKSTEP_TEST_SLOWDOWN 1
#endif
Dataset::MapFn blocking_map(int ms) {
  return [ms](const Element& e) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms * LOCKSTEP_TEST_SLOWDOWN));
    return e;
  };
}

const distribute::Verdict& input_verdict(const distribute::ProfileSummary& s) {
  for (const distribute::Verdict& v : s.verdicts)
    if (v.topic == "input") return v;
  throw std::runtime_error("no input verdict");
}

// The input share of step time from trace.json alone, as the summary defines it: per step (a
// host "step N" span), each thread's input spans that begin inside it, the longest thread's total;
// over the steps, that wait's sum over the steps' wall time.
double input_percent_of(const std::vector<Event>& spans) {
  std::vector<const Event*> steps;
  for (const Event& e : spans)
    if (e.name.rfind("step ", 0) == 0) steps.push_back(&e);
  std::sort(steps.begin(), steps.end(),
            [](const Event* a, const Event* b) { return a->ts_ns < b->ts_ns; });
  std::vector<std::map<int, int64_t>> per_thread(steps.size());
  for (const Event& e : spans) {
    if (e.name.rfind("input", 0) != 0) continue;  // a backup run's "input (backup)" too
    for (size_t i = steps.size(); i-- > 0;) {
      if (steps[i]->ts_ns > e.ts_ns) continue;
      if (e.ts_ns <= steps[i]->ts_ns + steps[i]->dur_ns) per_thread[i][e.tid] += e.dur_ns;
      break;
    }
  }
  int64_t wall = 0, input = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    wall += steps[i]->dur_ns;
    int64_t longest = 0;
    for (const auto& [tid, ns] : per_thread[i]) longest = std::max(longest, ns);
    input += longest;
  }
  return wall > 0 ? 100.0 * static_cast<double>(input) / static_cast<double>(wall) : 0;
}

// The input verdict's level from its share, with the default thresholds (20% and 5%).
Severity input_severity(double percent) {
  const distribute::VerdictThresholds th;
  if (percent >= th.input_bound_percent) return Severity::bound;
  if (percent >= th.input_moderate_percent) return Severity::warning;
  return Severity::ok;
}

// How long a pipeline's input takes against its steps is the machine's business (a busy machine
// makes a cached pipeline input-bound, and a fast one a blocking pipeline not); what the profiler
// owes is a share computed from the spans it recorded and the verdict its thresholds give that
// share. Both are checked here on real fits against trace.json, for a pipeline whose map blocks
// (the host's every fetch waits on it: each input span holds a whole blocking call) and for
// batches cached after the first pass; the grading itself is tested on fixed traces
// (tests/trace/summary_test.cpp).
TEST_F(ProfilerFiles, TheInputVerdictJudgesTheShareOfStepTimeTheTraceShowsWaitingForData) {
  distribute::Strategy strategy(config(2, 2));
  auto slow =
      strategy.experimental_distribute_dataset(random_dataset(2 * 128, 3).map(blocking_map(40)));
  const distribute::ProfileSummary s = fit_profiled(strategy, slow, 8, 2, 8);
  const nlohmann::json slow_trace = trace();
  const std::vector<Event> spans = spans_of(slow_trace);
  // The host fetches each step's batch itself, and sleep_for blocks at least as long as asked.
  const auto names = thread_names(slow_trace);
  int host_inputs = 0;
  for (const Event& e : spans) {
    if (e.name != "input" || names.at({e.pid, e.tid}) != "host / pool thread 0") continue;
    ++host_inputs;
    EXPECT_GE(e.dur_ns, int64_t{40} * 1000 * 1000) << "input at " << e.ts_ns;
  }
  EXPECT_EQ(host_inputs, 7);
  const double percent = input_percent_of(spans);
  // bound: the trace's times are whole nanoseconds, the summary's sums are doubles of ms.
  EXPECT_NEAR(s.input_percent, percent, 1e-9 * 100);
  EXPECT_EQ(input_verdict(s).severity, input_severity(percent)) << input_verdict(s).message;
  EXPECT_NE(read("summary.txt").find(input_verdict(s).message), std::string::npos);
  if (input_verdict(s).severity == Severity::bound) {
    EXPECT_NE(read("report.html").find("add prefetch / num_parallel_calls / cache before batch"),
              std::string::npos);
  }

  // Batches cached in memory after the first pass (8 batches): from step 9 on, no map runs.
  testing::ClassificationData d = testing::random_classification(8 * 256, kInputs, kClasses, 3);
  std::atomic<int> mapped{0};
  auto fast = strategy.experimental_distribute_dataset(Dataset::from_tensor_slices({d.x, d.y})
                                                           .batch(256)
                                                           .map([&mapped](const Element& e) {
                                                             mapped.fetch_add(1);
                                                             return e;
                                                           })
                                                           .cache()
                                                           .repeat());
  const distribute::ProfileSummary f = fit_profiled(strategy, fast, 24, 10, 24);
  EXPECT_EQ(mapped.load(), 8);
  const double fast_percent = input_percent_of(spans_of(trace()));
  EXPECT_NEAR(f.input_percent, fast_percent, 1e-9 * 100);
  EXPECT_EQ(input_verdict(f).severity, input_severity(fast_percent)) << input_verdict(f).message;
  EXPECT_NE(read("summary.txt").find(input_verdict(f).message), std::string::npos);
}

TEST_F(ProfilerFiles, ReplicasFetchingTheirOwnInputAreJudgedByTheLongestWait) {
  distribute::Strategy strategy(config(2, 2));
  testing::ClassificationData d = testing::random_classification(512, kInputs, kClasses, 4);
  auto dist = strategy.distribute_datasets_from_function(
      [&](const distribute::InputContext& ctx) {
        return Dataset::from_tensor_slices({d.x, d.y})
            .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            .repeat()
            .batch(64)
            .map(blocking_map(8));
      },
      {.experimental_replication_mode = distribute::InputReplicationMode::PER_REPLICA});
  const distribute::ProfileSummary s = fit_profiled(strategy, dist, 8, 2, 8);
  // The longest thread's waits, whichever threads fetched (input_percent_of).
  const std::vector<Event> spans = spans_of(trace());
  const double percent = input_percent_of(spans);
  EXPECT_NEAR(s.input_percent, percent, 1e-9 * 100);
  EXPECT_EQ(input_verdict(s).severity, input_severity(percent)) << input_verdict(s).message;
  // The fetches ran inside the replicas' tasks, or ahead of them on a thread the step left idle
  // (staged, outside any replica's run): an input span within a replica span on its track is that
  // replica's own.
  const auto tracks = by_track(spans);
  int inputs = 0;
  for (const auto& [key, events] : tracks) {
    for (size_t i = 0; i < events.size(); ++i) {
      if (events[i].name.rfind("input", 0) != 0) continue;
      ++inputs;
      for (size_t k = 0; k < i; ++k) {
        const Event& r = events[k];
        const bool within = r.name.rfind("replica", 0) == 0 && r.ts_ns <= events[i].ts_ns &&
                            events[i].ts_ns + events[i].dur_ns <= r.ts_ns + r.dur_ns;
        if (within) {
          EXPECT_EQ(r.replica, events[i].replica) << "input at " << events[i].ts_ns;
        }
      }
    }
  }
  EXPECT_GE(inputs, 2 * 7);
}

TEST_F(ProfilerFiles, StepsPerExecutionRoundsTheRangeOutToWholeDispatches) {
  distribute::Strategy strategy(config(2, 2));
  auto dist = strategy.experimental_distribute_dataset(random_dataset(2 * 32, 5));
  // Dispatches of 2 steps: [1, 2] [3, 4] [5, 6] [7, 8]; steps 3 to 5 need the second and third.
  const distribute::ProfileSummary s = fit_profiled(strategy, dist, 8, 3, 5, 2);
  EXPECT_EQ(s.first_step, 3);
  EXPECT_EQ(s.last_step, 6);
  EXPECT_EQ(s.steps, 4);
}

TEST_F(ProfilerFiles, CheckpointWritesAreRecorded) {
  distribute::Strategy strategy(config(2, 2));
  auto dist = strategy.experimental_distribute_dataset(random_dataset(2 * 32, 6));
  auto scope = strategy.scope();
  Sequential model = mlp();
  compile(model);
  auto backup = std::make_shared<callbacks::BackupAndRestore>((dir_ / "backup").string());
  auto cb = std::make_shared<callbacks::Profiler>(
      callbacks::ProfilerOptions{.log_dir = (dir_ / "profile").string(), .print_summary = false});
  model.fit(dist, {.epochs = 2, .steps_per_epoch = 3, .verbose = 0, .callbacks = {backup, cb}});
  ASSERT_TRUE(cb->summary().has_value());
  EXPECT_EQ(cb->summary()->checkpoints, 2);
  EXPECT_GT(cb->summary()->checkpoint_ms, 0.0);
  EXPECT_EQ(cb->summary()->steps, 5);  // steps 2 to 6
}

TEST_F(ProfilerFiles, ACustomLoopMarksItsStepsAndWritesTheProfile) {
  distribute::MirroredStrategy strategy(2);
  auto scope = strategy.scope();
  Sequential model = mlp();
  const std::vector<Variable> vars = model.trainable_weights();
  losses::CategoricalCrossentropy loss_fn;
  auto dist = strategy.experimental_distribute_dataset(random_dataset(2 * 32, 7));
  auto it = dist.make_iterator();
  profiler::start();
  for (int64_t step = 1; step <= 4; ++step) {
    profiler::StepTrace trace(step);
    auto batch = it.next();
    ASSERT_TRUE(batch.has_value());
    strategy.run(
        [&](distribute::ReplicaContext& ctx, const Element& e) {
          profiler::ScopedSpan forward(profiler::Phase::forward, ctx.local_replica_id());
          GradientTape tape;
          Tensor loss =
              distribute::compute_average_loss(loss_fn.call(e[1], model(e[0], true)), 2 * 32);
          forward.end();
          profiler::ScopedSpan backward(profiler::Phase::backward, ctx.local_replica_id());
          tape.gradient(loss, vars);
        },
        *batch);
  }
  profiler::stop();
  const auto summary = distribute::write_profile(dir_.string(), strategy);
  ASSERT_TRUE(summary.has_value());
  EXPECT_EQ(summary->steps, 4);
  EXPECT_EQ(summary->first_step, 1);
  std::set<int> forward_replicas;
  for (const Event& e : spans_of(trace()))
    if (e.name == "forward") forward_replicas.insert(e.replica);
  EXPECT_EQ(forward_replicas, (std::set<int>{0, 1}));
  // A directory that cannot be made is named in the error.
  std::ofstream(dir_ / "a_file") << "not a directory";
  const std::string below_a_file = (dir_ / "a_file" / "profile").string();
  try {
    distribute::write_profile(below_a_file, strategy);
    FAIL() << "expected Unavailable";
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("'" + below_a_file + "'"), std::string::npos) << e.what();
  }
  // Writing while recording is refused.
  profiler::start();
  EXPECT_THROW(distribute::write_profile(dir_.string(), strategy), FailedPrecondition);
  profiler::stop();
}

TEST(ProfilerCallback, RefusesAMissingDirectoryAndAnEmptyRange) {
  EXPECT_THROW(callbacks::Profiler({.log_dir = ""}), InvalidArgument);
  EXPECT_THROW(callbacks::Profiler({.log_dir = "p", .first_step = 0}), InvalidArgument);
  try {
    callbacks::Profiler({.log_dir = "p", .first_step = 5, .last_step = 4});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("first_step=5, last_step=4"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace lockstep::keras
