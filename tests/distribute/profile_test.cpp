// The profiler's distributed end: the task pool marks backup runs and the caller's waits, and
// gathering round-trips every span of every worker to the chief.
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "distribute/step/task_pool.h"
#include "lockstep/core/profiler.h"
#include "lockstep/core/task_cancellation.h"
#include "lockstep/distribute/profiler.h"
#include "lockstep/distribute/shared_memory_group.h"
#include "testing/run_threads.h"

namespace lockstep::distribute {
namespace {

using profiler::Phase;
using profiler::Span;

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
