// The profile's outputs from hand-made traces whose figures are worked out in the test: the Trace
// Event Format JSON (times exact to the nanosecond, parents before children), the summary's host
// view (its rows add up to each step), the slowest replica and worker, the verdicts at their
// thresholds; the task pool marks backup runs; gathering round-trips every span.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "lockstep/core/error.h"
#include "lockstep/core/profiler.h"
#include "lockstep/core/task_cancellation.h"
#include "lockstep/distribute/profile_summary.h"
#include "lockstep/distribute/profile_trace.h"
#include "lockstep/distribute/shared_memory_group.h"
#include "distribute/step/task_pool.h"
#include "testing/run_threads.h"

namespace lockstep::distribute {
namespace {

using profiler::Phase;
using profiler::Span;
constexpr int64_t kOrigin = 5'000'000'000;

// A span from microsecond offsets after the trace's origin.
Span us(Phase phase, int64_t begin_us, int64_t end_us, int64_t step, int replica = -1,
        bool backup = false) {
  return {kOrigin + begin_us * 1000, kOrigin + end_us * 1000, step, replica, phase, backup};
}

profiler::ThreadSpans thread(int tid, std::string name, std::vector<Span> spans) {
  return {tid, std::move(name), std::move(spans), 0};
}

// One worker: the host runs two steps, a pool thread the other replica and chunks, a third thread
// one backup run.
//   step 1 [0, 1000] us: input 100, replica 0 [100, 600] (forward 200, backward 200, rest 100),
//                         wait 100, update [700, 900] (local_reduce 40, rest 160), untraced 100
//   step 2 [1100, 2300]: input 300, replica 0 [1400, 1900] (forward 200, backward 300),
//                         wait 100, update [2000, 2300] (local_reduce 100, rest 200)
ProfileTrace one_worker_trace() {
  ProfileTrace t;
  t.origin_ns = kOrigin;
  WorkerSpans w;
  w.rank = 0;
  w.threads.push_back(
      thread(1, "host / pool thread 0",
             {us(Phase::input, 0, 100, 1), us(Phase::forward, 150, 350, 1, 0),
              us(Phase::backward, 350, 550, 1, 0), us(Phase::replica, 100, 600, 1, 0),
              us(Phase::wait, 600, 700, 1), us(Phase::local_reduce, 720, 760, 1),
              us(Phase::update, 700, 900, 1), us(Phase::step, 0, 1000, 1),
              us(Phase::input, 1100, 1400, 2), us(Phase::forward, 1400, 1600, 2, 0),
              us(Phase::backward, 1600, 1900, 2, 0), us(Phase::replica, 1400, 1900, 2, 0),
              us(Phase::wait, 1900, 2000, 2), us(Phase::local_reduce, 2000, 2100, 2),
              us(Phase::update, 2000, 2300, 2), us(Phase::step, 1100, 2300, 2)}));
  w.threads.push_back(
      thread(2, "pool thread 1",
             {us(Phase::forward, 120, 300, 1, 1), us(Phase::backward, 300, 680, 1, 1),
              us(Phase::replica, 110, 690, 1, 1), us(Phase::update, 700, 880, 1),
              us(Phase::replica, 1400, 1950, 2, 1)}));
  // A backup run of replica 0 that finished after the original: the original committed.
  w.threads.push_back(thread(3, "pool thread 2", {us(Phase::replica, 1500, 1950, 2, 0, true)}));
  t.workers.push_back(std::move(w));
  return t;
}

const PhaseRow& row(const ProfileSummary& s, Phase p) {
  for (const PhaseRow& r : s.phases)
    if (r.phase == p) return r;
  throw std::runtime_error("no row for phase " + std::string(profiler::phase_name(p)));
}

const Verdict& verdict(const ProfileSummary& s, const std::string& topic, int nth = 0) {
  for (const Verdict& v : s.verdicts)
    if (v.topic == topic && nth-- == 0) return v;
  throw std::runtime_error("no verdict " + topic);
}

TEST(ProfileTraceJson, IsTraceEventFormatWithExactTimesAndNamedTracks) {
  ProfileTrace t;
  t.origin_ns = 1'000'000;
  t.workers.push_back({0,
                       {thread(1, "host / pool thread 0",
                               {{1'240'000, 1'250'001, 3, 1, Phase::forward, true},
                                {1'234'567, 1'300'000, 3, -1, Phase::step, false}})}});
  t.workers.push_back(
      {1, {thread(1, "host", {{1'100'000, 1'100'000, 3, -1, Phase::wait, false}})}});
  const std::string text = trace_event_json(t);
  const nlohmann::json j = nlohmann::json::parse(text);  // throws on invalid JSON
  ASSERT_TRUE(j.at("traceEvents").is_array());
  std::map<int, std::string> process;
  std::map<std::pair<int, int>, std::string> thread_names;
  std::vector<nlohmann::json> spans;
  for (const auto& e : j.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "M" && e.at("name") == "process_name") process[e.at("pid")] = e.at("args").at("name");
    if (ph == "M" && e.at("name") == "thread_name")
      thread_names[{e.at("pid"), e.at("tid")}] = e.at("args").at("name");
    if (ph == "X") spans.push_back(e);
  }
  EXPECT_EQ(process, (std::map<int, std::string>{{0, "worker 0 (chief)"}, {1, "worker 1"}}));
  EXPECT_EQ(thread_names[std::make_pair(0, 1)], "host / pool thread 0");
  EXPECT_EQ(thread_names[std::make_pair(1, 1)], "host");
  ASSERT_EQ(spans.size(), 3u);
  // The step (the parent) comes first on its track although it was recorded last.
  EXPECT_EQ(spans[0].at("name"), "step 3");
  EXPECT_EQ(spans[0].at("pid"), 0);
  EXPECT_EQ(spans[0].at("tid"), 1);
  EXPECT_DOUBLE_EQ(spans[0].at("ts").get<double>(), 234.567);
  EXPECT_DOUBLE_EQ(spans[0].at("dur").get<double>(), 65.433);
  EXPECT_EQ(spans[1].at("name"), "forward (backup)");
  EXPECT_DOUBLE_EQ(spans[1].at("ts").get<double>(), 240.0);
  EXPECT_DOUBLE_EQ(spans[1].at("dur").get<double>(), 10.001);
  EXPECT_EQ(spans[1].at("args"), (nlohmann::json{{"step", 3}, {"replica", 1}, {"backup", true}}));
  EXPECT_EQ(spans[2].at("pid"), 1);
  EXPECT_DOUBLE_EQ(spans[2].at("ts").get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(spans[2].at("dur").get<double>(), 0.0);
  // Written with three decimals, not rounded through a double.
  EXPECT_NE(text.find("\"ts\":234.567,\"dur\":65.433"), std::string::npos);
  EXPECT_NE(text.find("\"ts\":240.000,\"dur\":10.001"), std::string::npos);
  EXPECT_EQ(j.at("otherData").at("workers"), 2);
}

TEST(ProfileSummary, HostViewRowsAddUpToEachStep) {
  const ProfileSummary s = summarize(one_worker_trace());
  EXPECT_EQ(s.workers, 1);
  EXPECT_EQ(s.threads, 3);
  EXPECT_EQ(s.steps, 2);
  EXPECT_EQ(s.chief_steps, 2);
  EXPECT_EQ(s.first_step, 1);
  EXPECT_EQ(s.last_step, 2);
  EXPECT_NEAR(s.step_mean_ms, 1.1, 1e-9);
  EXPECT_NEAR(s.step_p50_ms, 1.0, 1e-9);
  EXPECT_NEAR(s.step_p99_ms, 1.2, 1e-9);
  EXPECT_NEAR(s.between_steps_ms, 0.1, 1e-9);
  // Means of the two steps' exclusive times (see one_worker_trace).
  const std::pair<Phase, double> means[] = {
      {Phase::input, 0.2},         {Phase::forward, 0.2}, {Phase::backward, 0.25},
      {Phase::replica, 0.05},      {Phase::wait, 0.1},    {Phase::update, 0.18},
      {Phase::local_reduce, 0.07}, {Phase::step, 0.05},   {Phase::all_reduce, 0.0}};
  double share = 0;
  for (const auto& [p, mean] : means) {
    EXPECT_NEAR(row(s, p).mean_ms, mean, 1e-9) << profiler::phase_name(p);
    EXPECT_NEAR(row(s, p).share_percent, 100.0 * 2 * mean / 2.2, 1e-9) << profiler::phase_name(p);
    share += row(s, p).share_percent;
  }
  EXPECT_NEAR(share, 100.0, 1e-9);
  EXPECT_EQ(s.phases.size(), std::size(means));  // no checkpoint row without checkpoints
  EXPECT_NEAR(row(s, Phase::input).p50_ms, 0.1, 1e-9);
  EXPECT_NEAR(row(s, Phase::input).p99_ms, 0.3, 1e-9);
  // Every thread: step 1 adds the pool thread's forward 0.18, backward 0.38, replica rest 0.02,
  // update 0.18; step 2 its replica 1 run (0.55) and the third thread's backup run (0.45).
  EXPECT_NEAR(row(s, Phase::forward).all_threads_ms, (0.38 + 0.2) / 2, 1e-9);
  EXPECT_NEAR(row(s, Phase::backward).all_threads_ms, (0.58 + 0.3) / 2, 1e-9);
  EXPECT_NEAR(row(s, Phase::replica).all_threads_ms, (0.12 + 1.0) / 2, 1e-9);
  EXPECT_NEAR(row(s, Phase::update).all_threads_ms, (0.34 + 0.2) / 2, 1e-9);
}

TEST(ProfileSummary, NamesTheSlowestReplicaAndCountsBackups) {
  const ProfileSummary s = summarize(one_worker_trace());
  ASSERT_EQ(s.replicas.size(), 2u);
  // Replica 1 finished last in both steps (690 vs 600, 1950 vs 1900 us: the backup of replica 0
  // lost to the original, which finished first).
  EXPECT_EQ(s.replicas[1].replica, 1);
  EXPECT_NEAR(s.replicas[1].last_percent, 100.0, 1e-9);
  EXPECT_NEAR(s.replicas[1].others_wait_ms, (0.09 + 0.05) / 2, 1e-9);
  EXPECT_NEAR(s.replicas[1].mean_ms, (0.58 + 0.55) / 2, 1e-9);
  EXPECT_NEAR(s.replicas[0].mean_ms, 0.5, 1e-9);
  EXPECT_NEAR(s.replicas[0].last_percent, 0.0, 1e-9);
  // Task runs: 2 replica + 2 update on the host, 2 replica + 1 update on the pool thread (a
  // local_reduce inside an update is part of that task), 1 backup on the third thread.
  EXPECT_EQ(s.task_runs, 8u);
  EXPECT_EQ(s.backup_runs, 1u);
  const Verdict& b = verdict(s, "backups");
  EXPECT_NEAR(b.percent, 12.5, 1e-9);
  EXPECT_EQ(b.severity, Severity::warning);
  // The other replica's thread waited 0.09 and 0.05 ms for replica 1: 6.4% of step time.
  EXPECT_NEAR(s.replica_wait_ms, 0.07, 1e-9);
  EXPECT_NEAR(s.replica_wait_percent, 100.0 * 0.14 / 2.2, 1e-9);
  const Verdict& w = verdict(s, "stragglers");
  EXPECT_NEAR(w.percent, 100.0 * 0.14 / 2.2, 1e-9);
  EXPECT_EQ(w.severity, Severity::ok);
  EXPECT_EQ(w.message,
            "no replica straggles: replica 1 finished last in 100.0% of steps; the other "
            "replicas' threads waited 0.070 ms per step for the last one (6.4% of step time)");
  EXPECT_EQ(verdict(summarize(one_worker_trace(), {.straggler_percent = 6}), "stragglers").severity,
            Severity::warning);
}

TEST(ProfileSummary, InputVerdictFollowsItsThresholds) {
  // The longest input wait of any thread per step: 0.1 + 0.3 ms of 2.2 ms = 18.2%.
  const ProfileSummary s = summarize(one_worker_trace());
  EXPECT_NEAR(s.input_percent, 100.0 * 0.4 / 2.2, 1e-9);
  EXPECT_EQ(verdict(s, "input").severity, Severity::warning);
  EXPECT_EQ(verdict(s, "input").message.rfind("moderately input-bound: 18.2%", 0), 0u)
      << verdict(s, "input").message;
  const ProfileSummary bound = summarize(one_worker_trace(), {.input_bound_percent = 18});
  EXPECT_EQ(verdict(bound, "input").severity, Severity::bound);
  // The same measures judged against other thresholds give the same verdicts.
  const std::vector<Verdict> again = judge(s, {.input_bound_percent = 18});
  ASSERT_EQ(again.size(), bound.verdicts.size());
  for (size_t i = 0; i < again.size(); ++i) EXPECT_EQ(again[i].message, bound.verdicts[i].message);
  EXPECT_EQ(verdict(bound, "input").message,
            "input-bound: 18.2% of step time waiting for data - add prefetch / "
            "num_parallel_calls / cache before batch");
  const ProfileSummary ok =
      summarize(one_worker_trace(), {.input_bound_percent = 30, .input_moderate_percent = 19});
  EXPECT_EQ(verdict(ok, "input").severity, Severity::ok);
  EXPECT_EQ(verdict(ok, "input").message.rfind("not input-bound", 0), 0u);
}

TEST(ProfileSummary, ReplicasFetchingTheirOwnInputCountTheLongestWait) {
  // Per-replica pipelines: the fetch is inside each replica's task, on two threads at once; the
  // step waits for the longer one (0.6 of 1 ms), not their sum (1.0).
  ProfileTrace t;
  t.origin_ns = kOrigin;
  t.workers.push_back(
      {0,
       {thread(1, "host / pool thread 0",
               {us(Phase::input, 0, 400, 1, 0), us(Phase::replica, 0, 500, 1, 0),
                us(Phase::wait, 500, 800, 1), us(Phase::step, 0, 1000, 1)}),
        thread(2, "pool thread 1",
               {us(Phase::input, 0, 600, 1, 1), us(Phase::replica, 0, 800, 1, 1)})}});
  const ProfileSummary s = summarize(t);
  EXPECT_NEAR(s.input_percent, 60.0, 1e-9);
  EXPECT_EQ(verdict(s, "input").severity, Severity::bound);
}

TEST(ProfileSummary, AReplicaRunAfterAnotherOnOneThreadMadeNobodyWait) {
  // The host ran both replicas in turn while the other thread was descheduled: replica 1 finished
  // last, but no thread waited for it; the host's step was mostly handing out tasks.
  ProfileTrace t;
  t.origin_ns = kOrigin;
  t.workers.push_back(
      {0,
       {thread(1, "host / pool thread 0",
               {us(Phase::replica, 0, 300, 1, 0), us(Phase::replica, 700, 1000, 1, 1),
                us(Phase::tasks, 0, 1000, 1), us(Phase::step, 0, 1000, 1)}),
        thread(2, "pool thread 1", {})}});
  const ProfileSummary s = summarize(t);
  ASSERT_EQ(s.replicas.size(), 2u);
  EXPECT_NEAR(s.replicas[1].last_percent, 100.0, 1e-9);
  EXPECT_NEAR(s.replicas[1].others_wait_ms, 0.0, 1e-9);
  EXPECT_NEAR(row(s, Phase::tasks).mean_ms, 0.4, 1e-9);
  EXPECT_EQ(row(s, Phase::tasks).name, "tasks (scheduling)");
  const Verdict& v = verdict(s, "scheduling");
  EXPECT_NEAR(v.percent, 40.0, 1e-9);
  EXPECT_NEAR(s.scheduling_percent, 40.0, 1e-9);
  EXPECT_EQ(v.severity, Severity::warning);
  EXPECT_EQ(summarize(t, {.scheduling_percent = 41}).verdicts.size(), s.verdicts.size());
  EXPECT_EQ(verdict(summarize(t, {.scheduling_percent = 41}), "scheduling").severity, Severity::ok);
}

TEST(ProfileSummary, NamesTheSlowestWorkerAndTheCommunicationShare) {
  // Worker 1 computes 0.9 ms per step, worker 0 0.6 ms and then waits in the all-reduce; worker 0's
  // communication thread all-reduced [100, 800] us of step 1 while the host computed until 600.
  ProfileTrace t;
  t.origin_ns = kOrigin;
  t.workers.push_back(
      {0,
       {thread(1, "host",
               {us(Phase::forward, 0, 600, 1), us(Phase::all_reduce, 600, 1000, 1),
                us(Phase::step, 0, 1000, 1), us(Phase::forward, 1000, 1600, 2),
                us(Phase::all_reduce, 1600, 2000, 2), us(Phase::step, 1000, 2000, 2)}),
        thread(2, "communication", {us(Phase::all_reduce, 100, 800, 1)})}});
  t.workers.push_back(
      {1,
       {thread(1, "host",
               {us(Phase::forward, 0, 900, 1), us(Phase::all_reduce, 900, 1000, 1),
                us(Phase::step, 0, 1000, 1), us(Phase::forward, 1000, 1900, 2),
                us(Phase::all_reduce, 1900, 2000, 2), us(Phase::step, 1000, 2000, 2)})}});
  const ProfileSummary s = summarize(t);
  EXPECT_EQ(s.workers, 2);
  EXPECT_EQ(s.steps, 4);
  EXPECT_EQ(s.chief_steps, 2);
  EXPECT_NE(format_summary(s).find("2 step(s) (steps 1..2) on 2 worker(s) (4 worker-steps)"),
            std::string::npos)
      << format_summary(s);
  ASSERT_EQ(s.worker_stats.size(), 2u);
  EXPECT_NEAR(s.worker_stats[0].compute_ms, 0.6, 1e-9);
  EXPECT_NEAR(s.worker_stats[1].compute_ms, 0.9, 1e-9);
  EXPECT_NEAR(s.worker_stats[1].last_percent, 100.0, 1e-9);
  EXPECT_NEAR(s.worker_stats[1].others_wait_ms, 0.3, 1e-9);
  EXPECT_NEAR(s.worker_stats[0].last_percent, 0.0, 1e-9);
  // Exposed all-reduce: (0.4 + 0.1) per step pair of 2 ms; hidden: 0.7 - 0.2 ms under the host's
  // wait, in one of four (worker, step) samples.
  EXPECT_NEAR(s.allreduce_exposed_ms, 0.25, 1e-9);
  EXPECT_NEAR(s.allreduce_hidden_ms, 0.5 / 4, 1e-9);
  EXPECT_NEAR(s.communication_percent, 25.0, 1e-9);
  EXPECT_NEAR(s.worker_wait_percent, 30.0, 1e-9);
  const Verdict& c = verdict(s, "communication");
  EXPECT_NEAR(c.percent, 25.0, 1e-9);
  EXPECT_EQ(c.severity, Severity::bound);
  const Verdict& w = verdict(s, "stragglers");  // no replica spans: the worker verdict only
  EXPECT_NEAR(w.percent, 30.0, 1e-9);
  EXPECT_EQ(w.severity, Severity::warning);
  EXPECT_NE(w.message.find("worker 1 was the slowest in 100.0% of steps"), std::string::npos)
      << w.message;
}

TEST(ProfileSummary, ATraceWithoutStepsSaysSoAndAnEmptyOneIsRefused) {
  ProfileTrace t;
  t.workers.push_back({0, {thread(1, "thread 1", {us(Phase::forward, 0, 10, -1)})}});
  const ProfileSummary s = summarize(t);
  EXPECT_EQ(s.steps, 0);
  EXPECT_EQ(verdict(s, "steps").severity, Severity::warning);
  EXPECT_NE(format_summary(s).find("no steps recorded"), std::string::npos);
  EXPECT_NE(html_report(s).find("No training step was recorded"), std::string::npos);
  EXPECT_THROW(summarize(ProfileTrace{}), InvalidArgument);
}

TEST(ProfileReport, IsSelfContainedAndCarriesTheTableChartAndVerdicts) {
  const ProfileSummary s = summarize(one_worker_trace());
  const std::string html = html_report(s);
  EXPECT_EQ(html.rfind("<!doctype html>", 0), 0u);
  for (const char* remote : {"<script", "<link", "src=", "@import", "url(", "https:"})
    EXPECT_EQ(html.find(remote), std::string::npos) << remote;
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("moderately input-bound"), std::string::npos);
  EXPECT_NE(html.find("<td>0.200</td>"), std::string::npos);  // a mean from the table
  const std::string svg = step_breakdown_svg(s);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("<title>step 2: 1.20 ms</title>"), std::string::npos);
  const std::string text = format_summary(s);
  EXPECT_NE(text.find("2 step(s) (steps 1..2)"), std::string::npos) << text;
  EXPECT_NE(text.find("[input, warning] moderately input-bound"), std::string::npos) << text;
}

// A phase whose tasks are chunks of an update; the helper's first run stalls in the test hook.
class UpdatePhase : public TaskPhase {
 public:
  int num_tasks() const override { return 2; }
  void* run(int, int) override {
    check_task_cancelled();
    return nullptr;
  }
  void commit(int, void*) override {}
  void discard(int, void*) override {}
  profiler::Phase trace_phase() const override { return Phase::update; }
};

TEST(ProfileTaskPool, MarksBackupRunsAndTheCallersWait) {
  // No deadline within reach: the caller backs the helper's task up only once it has seen the
  // helper's run make no progress, which takes two looks a stall window apart and a wait between
  // them. (A 100 µs deadline let a caller that was itself descheduled past it back up at its
  // first look, without a wait: the check below failed under load.)
  // A quiet machine: on a busy one the caller backs a task held on another CPU up at once, with
  // no wait.
  TaskPool pool({.num_threads = 2,
                 .backup_factor = 1e9,
                 .backup_slack = std::chrono::hours(1),
                 .stall_window = std::chrono::microseconds(50),
                 .machine_busy = [] { return false; }});
  std::mutex mu;
  std::condition_variable cv;
  bool helper_stalled = false, release = false;
  pool.set_run_hook([&](int, int, int thread, bool backup, uint64_t) {
    std::unique_lock lock(mu);
    if (backup) return;
    if (thread != 0 && !helper_stalled) {
      helper_stalled = true;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    } else if (thread == 0 && !helper_stalled) {
      cv.wait(lock, [&] { return helper_stalled; });
    }
  });
  profiler::start();
  UpdatePhase phase;
  pool.run(phase);  // the caller backs up the stalled task
  {
    std::lock_guard lock(mu);
    release = true;
    cv.notify_all();
  }
  pool.wait_for_runs_before(UINT64_MAX);
  profiler::stop();
  pool.set_run_hook({});
  std::map<std::string, std::vector<Span>> by_name;
  for (const profiler::ThreadSpans& t : profiler::collect()) by_name[t.name] = t.spans;
  ASSERT_EQ(by_name.count("host / pool thread 0"), 1u);
  int host_updates = 0, host_backups = 0, waits = 0;
  for (const Span& s : by_name["host / pool thread 0"]) {
    host_updates += s.phase == Phase::update;
    host_backups += s.phase == Phase::update && s.backup;
    waits += s.phase == Phase::wait;
  }
  // Its own task, then the helper's as a backup, after waiting to see the helper stalled.
  EXPECT_EQ(host_updates, 2);
  EXPECT_EQ(host_backups, 1);
  EXPECT_GE(waits, 1);
  // The helper's stalled run, released after the phase ended, found its task done and ran
  // nothing: no span of its own.
  int helper_updates = 0;
  for (const Span& s : by_name["pool thread 1"]) helper_updates += s.phase == Phase::update;
  EXPECT_EQ(helper_updates, 0);
}

TEST(ProfileGather, RoundTripsEverySpanToTheChiefWithOneProcessPerWorker) {
  profiler::start();
  {
    profiler::set_thread_label("gather test");
    profiler::StepTrace step(4);
    profiler::ScopedSpan forward(Phase::forward, 2);
    profiler::BackupRunScope backup(true);
    profiler::ScopedSpan wait(Phase::wait);
  }
  profiler::stop();
  const std::vector<profiler::ThreadSpans> mine = profiler::collect();
  SharedMemoryGroup group(2);
  std::vector<ProfileTrace> got(2);
  testing::run_threads(
      2, [&](int r) { got[static_cast<size_t>(r)] = gather_trace(group.communicator(r).get()); });
  EXPECT_TRUE(got[1].workers.empty());  // only the chief receives the trace
  const ProfileTrace& t = got[0];
  EXPECT_EQ(t.origin_ns, profiler::session_begin_ns());
  ASSERT_EQ(t.workers.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const WorkerSpans& w = t.workers[static_cast<size_t>(r)];
    EXPECT_EQ(w.rank, r);
    // Both ranks are threads of this process: each sent the process's spans, on the same clock.
    ASSERT_EQ(w.threads.size(), mine.size());
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_EQ(w.threads[i].name, mine[i].name);
      EXPECT_EQ(w.threads[i].tid, mine[i].tid);
      ASSERT_EQ(w.threads[i].spans.size(), mine[i].spans.size());
      for (size_t k = 0; k < mine[i].spans.size(); ++k) {
        const Span &a = w.threads[i].spans[k], &b = mine[i].spans[k];
        EXPECT_EQ(a.begin_ns, b.begin_ns);
        EXPECT_EQ(a.end_ns, b.end_ns);
        EXPECT_EQ(a.step, b.step);
        EXPECT_EQ(a.replica, b.replica);
        EXPECT_EQ(a.phase, b.phase);
        EXPECT_EQ(a.backup, b.backup);
      }
    }
  }
  const nlohmann::json j = nlohmann::json::parse(trace_event_json(t));
  std::set<int> pids;
  for (const auto& e : j.at("traceEvents"))
    if (e.at("ph") == "X") pids.insert(e.at("pid").get<int>());
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
}

}  // namespace
}  // namespace lockstep::distribute
