// The step profiler's recorder: nothing is kept while it is off; on, each thread records into its
// own buffer, spans nest on a thread and carry the step open when they began; a full buffer drops
// and counts; backup runs are marked.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/core/profiler.h"

namespace lockstep::profiler {
namespace {

// Every test leaves the recorder off, whatever it asserts.
class Recorder : public ::testing::Test {
 protected:
  void TearDown() override {
    if (recording()) stop();
  }
};

const ThreadSpans* find_thread(const std::vector<ThreadSpans>& threads, const std::string& name) {
  for (const ThreadSpans& t : threads)
    if (t.name == name) return &t;
  return nullptr;
}

TEST_F(Recorder, IsOffByDefaultAndKeepsNothingRecordedWhileOff) {
  ASSERT_FALSE(recording());
  // Spans and steps on a thread while off: that thread never gets a buffer.
  std::thread([] {
    set_thread_label("off thread");
    StepTrace step(1);
    ScopedSpan a(Phase::forward, 0);
    ScopedSpan b(Phase::backward, 0);
  }).join();
  start();
  stop();
  EXPECT_TRUE(collect().empty());
}

TEST_F(Recorder, SpansOfAThreadNestAndCarryTheOpenStep) {
  start();
  {
    StepTrace step(7);
    ScopedSpan input(Phase::input);
    input.end();
    ScopedSpan forward(Phase::forward, 1);
    { ScopedSpan backward(Phase::backward, 1); }
  }
  ScopedSpan outside(Phase::checkpoint);
  outside.end();
  stop();
  const std::vector<ThreadSpans> threads = collect();
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_EQ(threads[0].name, "host");  // a StepTrace names an unnamed thread
  EXPECT_EQ(threads[0].tid, 1);
  const std::vector<Span>& s = threads[0].spans;
  ASSERT_EQ(s.size(), 5u);
  // In the order they ended: children before their parents.
  EXPECT_EQ(s[0].phase, Phase::input);
  EXPECT_EQ(s[1].phase, Phase::backward);
  EXPECT_EQ(s[2].phase, Phase::forward);
  EXPECT_EQ(s[3].phase, Phase::step);
  EXPECT_EQ(s[4].phase, Phase::checkpoint);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(s[static_cast<size_t>(i)].step, 7) << i;
  EXPECT_EQ(s[4].step, -1);  // after the step ended
  EXPECT_EQ(s[1].replica, 1);
  EXPECT_EQ(s[0].replica, -1);
  for (const Span& x : s) {
    EXPECT_LE(x.begin_ns, x.end_ns);
    EXPECT_FALSE(x.backup);
  }
  // Nesting: backward inside forward inside the step; input before forward; the checkpoint after.
  EXPECT_LE(s[2].begin_ns, s[1].begin_ns);
  EXPECT_LE(s[1].end_ns, s[2].end_ns);
  EXPECT_LE(s[3].begin_ns, s[0].begin_ns);
  EXPECT_LE(s[0].end_ns, s[2].begin_ns);
  EXPECT_LE(s[2].end_ns, s[3].end_ns);
  EXPECT_LE(s[3].end_ns, s[4].begin_ns);
  EXPECT_GE(s[3].begin_ns, session_begin_ns());
}

TEST_F(Recorder, EachThreadRecordsOnItsOwnNamedTrack) {
  start();
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([t] {
      set_thread_label("pool thread", t);
      for (int i = 0; i <= t; ++i) ScopedSpan span(Phase::update);
    });
  }
  for (auto& t : threads) t.join();
  stop();
  const std::vector<ThreadSpans> got = collect();
  ASSERT_EQ(got.size(), 3u);
  std::vector<int> tids;
  for (int t = 0; t < 3; ++t) {
    const ThreadSpans* ts = find_thread(got, "pool thread " + std::to_string(t));
    ASSERT_NE(ts, nullptr) << t;
    EXPECT_EQ(ts->spans.size(), static_cast<size_t>(t + 1));
    tids.push_back(ts->tid);
  }
  std::sort(tids.begin(), tids.end());
  EXPECT_EQ(tids, (std::vector<int>{1, 2, 3}));
}

TEST_F(Recorder, AFullBufferKeepsTheFirstSpansAndCountsTheRest) {
  start({.spans_per_thread = 4});
  for (int i = 0; i < 10; ++i) ScopedSpan span(Phase::wait, i);
  stop();
  const std::vector<ThreadSpans> got = collect();
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].spans.size(), 4u);
  EXPECT_EQ(got[0].dropped, 6u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[0].spans[static_cast<size_t>(i)].replica, i);
}

TEST_F(Recorder, ANewSessionStartsEmpty) {
  start();
  { ScopedSpan span(Phase::forward); }
  stop();
  ASSERT_EQ(collect().size(), 1u);
  start();
  stop();
  EXPECT_TRUE(collect().empty());
}

TEST_F(Recorder, ASpanOpenWhenRecordingStopsEndsIntoItsSession) {
  start();
  ScopedSpan span(Phase::all_reduce);
  stop();
  span.end();
  const std::vector<ThreadSpans> got = collect();
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].spans.size(), 1u);
  EXPECT_EQ(got[0].spans[0].phase, Phase::all_reduce);
}

TEST_F(Recorder, BackupRunsMarkTheirSpans) {
  start();
  {
    BackupRunScope backup(true);
    ScopedSpan run(Phase::replica, 2);
    ScopedSpan forward(Phase::forward, 2);
  }
  {
    BackupRunScope not_backup(false);
    ScopedSpan run(Phase::replica, 2);
  }
  stop();
  const std::vector<Span> s = collect().at(0).spans;
  ASSERT_EQ(s.size(), 3u);
  EXPECT_TRUE(s[0].backup);
  EXPECT_TRUE(s[1].backup);
  EXPECT_FALSE(s[2].backup);
}

TEST_F(Recorder, AnInnerStepTraceAndADiscardedOneRecordNothing) {
  start();
  {
    StepTrace outer(3);
    StepTrace inner(99);  // fit inside a custom loop's step: the loop's numbering wins
    ScopedSpan forward(Phase::forward);
  }
  {
    StepTrace not_a_step(4);
    ScopedSpan input(Phase::input);
    input.end();
    not_a_step.discard();
  }
  {
    StepTrace a(5);
    a.next(6);
  }
  stop();
  std::vector<int64_t> steps;
  const auto collected = collect();  // kept alive: a range-for would not extend the temporary
  for (const Span& s : collected.at(0).spans)
    if (s.phase == Phase::step) steps.push_back(s.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{3, 5, 6}));
}

TEST_F(Recorder, RefusesASecondStartAndAnEmptyBuffer) {
  EXPECT_THROW(start({.spans_per_thread = 0}), InvalidArgument);
  start();
  try {
    start();
    FAIL() << "expected FailedPrecondition";
  } catch (const FailedPrecondition& e) {
    EXPECT_NE(std::string(e.what()).find("already recording"), std::string::npos) << e.what();
  }
}

TEST(ProfilerPhase, NamesEveryPhase) {
  const char* names[] = {"none",    "step",     "input",        "replica",
                         "forward", "backward", "local_reduce", "all_reduce",
                         "update",  "wait",     "checkpoint",   "tasks"};
  for (int p = 0; p < kNumPhases; ++p) EXPECT_EQ(phase_name(static_cast<Phase>(p)), names[p]) << p;
}

}  // namespace
}  // namespace lockstep::profiler
