// StepInput (src/distribute/step/step_input.h) and its owner, ReplicaRuns: every run of a
// replica in a step gets what the step's first pull for it got — the same element, or the same
// error — and the pull function is called only while the step runs. ReplicaRuns keeps a step's
// function and input until the step retires, and a gang rerun trains on the elements the tasks
// pulled. The pipelines here count their pulls, so a second pull for a step shows.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "distribute/step/replica_runs.h"
#include "distribute/step/step_input.h"
#include "lockstep/core/error.h"
#include "lockstep/core/task_cancellation.h"
#include "step_fakes.h"

namespace lockstep::distribute {
namespace {

using testing::CountingPipelines;
using testing::make_strategy;
using testing::make_variables;
using testing::value;

TEST(StepInput, EveryRunOfAStepGetsTheFirstPullsElement) {
  CountingPipelines p(2);
  StepInput in = p.input();
  in.begin(2);
  EXPECT_EQ(value(in.get(1)), 21.0f);
  EXPECT_EQ(value(in.get(1)), 21.0f);  // a backup run of replica 1
  EXPECT_EQ(value(in.get(0)), 11.0f);
  EXPECT_EQ(p.counts(), std::vector<int>({1, 1}));
  // The next step's input pulls on.
  StepInput next = p.input();
  next.begin(2);
  EXPECT_EQ(value(next.get(1)), 22.0f);
  EXPECT_EQ(p.counts(), std::vector<int>({1, 2}));
}

TEST(StepInput, AFailedPullFailsEveryRunOfItsReplicaWithoutPullingAgain) {
  CountingPipelines p(1);
  p.bad_replica = 0;
  p.bad = 2;
  StepInput first = p.input();
  first.begin(1);
  EXPECT_EQ(value(first.get(0)), 11.0f);
  StepInput failing = p.input();
  failing.begin(1);
  for (int run = 0; run < 2; ++run) {  // the first run of the step, then its backup
    try {
      failing.get(0);
      FAIL() << "run " << run << " of the step returned an element";
    } catch (const DataLoss& e) {
      EXPECT_STREQ(e.what(), "DataLoss: corrupt record at pull 2");
    }
  }
  // The backup did not pull the element after the corrupt one.
  EXPECT_EQ(p.counts(), std::vector<int>({2}));
  StepInput next = p.input();
  next.begin(1);
  EXPECT_EQ(value(next.get(0)), 13.0f);
}

TEST(StepInput, GivesTheHostsElementsAsTheyAre) {
  Tensor a = Tensor::scalar(1.0f), b = Tensor::scalar(2.0f);
  StepInput in(PerReplica<Element>{.values = {Element{a}, Element{b}}});
  in.begin(2);
  EXPECT_EQ(in.get(1)[0].raw_data(), b.raw_data()) << "no copy";
  EXPECT_EQ(in.get(0)[0].raw_data(), a.raw_data());
  StepInput none;
  none.begin(2);
  EXPECT_TRUE(none.get(1).empty());
  StepInput short_of_one(PerReplica<Element>{.values = {Element{a}}});
  EXPECT_THROW(short_of_one.begin(2), InvalidArgument);
}

TEST(StepInput, ClosedItPullsNoMoreAndReleasesThePullButKeepsTheElements) {
  auto pipeline = std::make_shared<CountingPipelines>(2);
  std::weak_ptr<CountingPipelines> alive = pipeline;
  StepInput in([pipeline](int r) { return pipeline->pull(r); });
  pipeline.reset();  // the pull function holds the only reference
  in.begin(2);
  EXPECT_EQ(value(in.get(0)), 11.0f);
  in.close();
  EXPECT_TRUE(alive.expired()) << "the pull function was released";
  EXPECT_EQ(value(in.get(0)), 11.0f);
  EXPECT_THROW(in.get(1), TaskCancelled);
}

// stage() runs the stage function (the next steps' input, pulled ahead by idle threads) until the
// input closes; closing releases it with the pull function.
TEST(StepInput, StagesUntilClosedAndReleasesTheStageFunction) {
  auto staged = std::make_shared<int>(0);
  std::weak_ptr<int> alive = staged;
  StepInput in([](int r) { return Element{Tensor::scalar(static_cast<float>(r))}; },
               [staged](int) { return ++*staged <= 2; });
  in.begin(2);
  EXPECT_TRUE(in.stage(0));
  EXPECT_TRUE(in.stage(0));
  EXPECT_FALSE(in.stage(0));  // the function has nothing more
  EXPECT_EQ(*staged, 3);
  staged.reset();
  in.close();
  EXPECT_TRUE(alive.expired()) << "the stage function was released";
  EXPECT_FALSE(in.stage(0));
  StepInput none([](int) { return Element{}; });
  EXPECT_FALSE(none.stage(0));
}

// close() waits for a staging under way, whether it watches for its end first (spin) or sleeps
// on it at once: the stage function, released only after the closing thread has announced
// itself, checks as it returns that close() has not.
TEST(StepInput, ClosingWaitsForAStagingUnderWayWithOrWithoutSpinning) {
  for (const auto spin : {std::chrono::microseconds(0), std::chrono::microseconds(300)}) {
    std::mutex mu;
    std::condition_variable cv;
    bool staging = false, released = false;
    std::atomic<bool> closing{false}, closed{false}, closed_while_staging{false};
    StepInput in([](int) { return Element{}; },
                 [&](int) {
                   std::unique_lock lock(mu);
                   staging = true;
                   cv.notify_all();
                   cv.wait_for(lock, std::chrono::minutes(1), [&] { return released; });
                   if (closed.load()) closed_while_staging = true;
                   return true;
                 });
    in.begin(1);
    std::thread stager([&] { EXPECT_TRUE(in.stage(0)); });
    {
      std::unique_lock lock(mu);
      cv.wait_for(lock, std::chrono::minutes(1), [&] { return staging; });
      ASSERT_TRUE(staging);
    }
    std::thread closer([&] {
      closing = true;
      in.close(spin);
      closed = true;
    });
    while (!closing.load()) std::this_thread::yield();
    {
      std::lock_guard lock(mu);
      released = true;
      cv.notify_all();
    }
    stager.join();
    closer.join();
    EXPECT_FALSE(closed_while_staging.load()) << "spin " << spin.count() << " us";
    EXPECT_FALSE(in.stage(0)) << "closed: nothing more to stage";
  }
}

// ---- Through ReplicaRuns, which owns each step's input.

struct SeenState : RunState {
  float seen = 0;
};

ReplicaRuns::Options seen_options() {
  return {.make_state = [] { return std::make_unique<SeenState>(); }};
}

// Records the element's value in the run's state and gives no gradients.
void record(ReplicaRun& run, const Element& e) {
  static_cast<SeenState*>(run.state())->seen = value(e);
  run.set_gradients(std::vector<Tensor>(run.gradient_buffers().size()));
}

float seen(const ReplicaRuns& runs, int r) {
  return static_cast<SeenState*>(runs.committed_state(r))->seen;
}

TEST(ReplicaRuns, EachStepPullsEachReplicasElementOnceOnAnyNumberOfThreads) {
  for (int threads : {1, 2, 3}) {
    auto strategy = make_strategy(3, threads);
    ReplicaRuns runs(*strategy, make_variables({5}), seen_options());
    CountingPipelines p(3);
    for (int step = 1; step <= 3; ++step) {
      runs.begin_step(p.input(),
                      [](ReplicaContext&, ReplicaRun& run, const Element& e) { record(run, e); });
      ASSERT_TRUE(runs.run_as_tasks(false));
      runs.retire_previous_step();
      for (int r = 0; r < 3; ++r) EXPECT_EQ(seen(runs, r), static_cast<float>(10 * (r + 1) + step));
      EXPECT_EQ(p.counts(), std::vector<int>(3, step)) << threads << " threads";
    }
  }
}

TEST(ReplicaRuns, AGangRerunTrainsOnTheElementsTheTasksPulled) {
  auto strategy = make_strategy(2, 2);
  ReplicaRuns runs(*strategy, make_variables({4}), seen_options());
  CountingPipelines p(2);
  runs.begin_step(p.input(), [](ReplicaContext& ctx, ReplicaRun& run, const Element& e) {
    Tensor one = Tensor::zeros({1}, DType::float32);
    ctx.all_reduce(ReduceOp::SUM, one);  // in a task: CollectiveInTask
    record(run, e);
  });
  EXPECT_FALSE(runs.run_as_tasks(false));
  runs.run_as_gang();
  EXPECT_EQ(seen(runs, 0), 11.0f);
  EXPECT_EQ(seen(runs, 1), 21.0f);
  EXPECT_EQ(p.counts(), std::vector<int>({1, 1}));
}

TEST(ReplicaRuns, AStepKeepsItsFunctionAndInputUntilItRetires) {
  auto strategy = make_strategy(2, 2);
  ReplicaRuns runs(*strategy, make_variables({4}), seen_options());
  CountingPipelines p(2);
  std::vector<std::weak_ptr<int>> fns, inputs;
  for (int step = 1; step <= 2; ++step) {
    auto fn_token = std::make_shared<int>(step), input_token = std::make_shared<int>(step);
    fns.push_back(fn_token);
    inputs.push_back(input_token);
    runs.begin_step(StepInput([&p, token = std::move(input_token)](int r) { return p.pull(r); }),
                    [token = std::move(fn_token)](ReplicaContext&, ReplicaRun& run,
                                                  const Element& e) { record(run, e); });
    ASSERT_TRUE(runs.run_as_tasks(false));
    EXPECT_TRUE(inputs.back().expired()) << "the step is over: its pull function is released";
    EXPECT_FALSE(fns.back().expired()) << "a losing run may still call the function";
    runs.retire_previous_step();
  }
  EXPECT_TRUE(fns[0].expired()) << "step 1 retired when step 2 did";
  EXPECT_FALSE(fns[1].expired());
  runs.settle();
  EXPECT_TRUE(fns[1].expired());
  EXPECT_EQ(seen(runs, 1), 22.0f) << "the committed runs stay readable";
}

}  // namespace
}  // namespace lockstep::distribute
