// A step's input through ReplicatedStep::run, with fake replica functions whose gradient is their
// element's value: each replica trains on its element, given or pulled; a backup run wins on the
// element the first run pulled, and the lost run still reads that element after run() returned
// and the pipeline is gone; a failed pull fails the step with its error, no backup pulls past it,
// and the next step pulls on.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "distribute/step/replicated_step.h"
#include "distribute/step/task_pool.h"
#include "step_fakes.h"

namespace lockstep::distribute {
namespace {

using testing::CountingPipelines;
using testing::FakeUpdate;
using testing::make_strategy;
using testing::make_variables;
using testing::value;

constexpr auto kPatience = std::chrono::minutes(1);

struct SeenState : RunState {
  float seen = 0;
  bool backup = false;
};

// Every gradient element is the element's value; the run's state records it.
void train_on(ReplicaRun& run, const Element& e) {
  for (const Tensor& g : run.gradient_buffers()) {
    for (int64_t j = 0; j < g.num_elements(); ++j) g.data<float>()[j] = value(e);
  }
  run.set_gradients(run.gradient_buffers());
  auto& st = static_cast<SeenState&>(*run.state());
  st.seen = value(e);
  st.backup = TaskPool::in_backup_run();
}

struct Fixture {
  explicit Fixture(int replicas) : strategy(make_strategy(replicas, 2)), vars(make_variables({7})) {
    step = std::make_unique<ReplicatedStep>(*strategy, vars, rule,
                                            [] { return std::make_unique<SeenState>(); });
    const float* w = vars[0].raw_value().data<float>();
    expected.assign(w, w + 7);
  }
  const SeenState& committed(int r) const {
    return static_cast<const SeenState&>(*step->committed_state(r));
  }
  // FakeUpdate: w' = w - g / 2, with g the sum of the replicas' gradients.
  void expect_updated_by(float g) {
    for (size_t j = 0; j < expected.size(); ++j) {
      expected[j] -= g * 0.5f;
      EXPECT_EQ(vars[0].raw_value().data<float>()[j], expected[j]) << j;
    }
  }
  std::unique_ptr<Strategy> strategy;
  std::vector<Variable> vars;
  FakeUpdate rule;
  std::unique_ptr<ReplicatedStep> step;
  std::vector<float> expected;
};

TEST(ReplicatedStep, TrainsEachReplicaOnItsElementGivenOrPulled) {
  Fixture f(2);
  auto fn = [](ReplicaContext&, ReplicaRun& run, const Element& e) { train_on(run, e); };
  f.step->run(
      StepInput(PerReplica<Element>{.values = {{Tensor::scalar(1.0f)}, {Tensor::scalar(2.0f)}}}),
      fn, true);
  EXPECT_EQ(f.committed(1).seen, 2.0f);
  f.expect_updated_by(1.0f + 2.0f);
  CountingPipelines p(2);
  f.step->run(p.input(), fn, true);
  EXPECT_EQ(f.committed(0).seen, 11.0f);
  EXPECT_EQ(f.committed(1).seen, 21.0f);
  f.expect_updated_by(11.0f + 21.0f);
}

// Holds the first run of a replica that a pool helper starts inside the replica function until
// released; the caller's first runs wait until one is held, so that the caller finishes the
// others and backs the held one up.
class HeldRun {
 public:
  // Whether this run was held (it returns once released).
  bool maybe_hold(int replica) {
    if (TaskPool::in_backup_run()) return false;
    std::unique_lock lock(mu_);
    if (std::this_thread::get_id() == caller_) {
      cv_.wait_for(lock, kPatience, [this] { return held_ >= 0; });
      return false;
    }
    if (held_ >= 0) return false;
    held_ = replica;
    cv_.notify_all();
    cv_.wait_for(lock, kPatience, [this] { return released_; });
    return true;
  }
  int held() {
    std::lock_guard lock(mu_);
    return held_;
  }
  void release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::thread::id caller_ = std::this_thread::get_id();
  std::mutex mu_;
  std::condition_variable cv_;
  int held_ = -1;
  bool released_ = false;
};

TEST(ReplicatedStep, ABackupRunWinsAndTheLostRunReadsItsInputAfterTheStepReturned) {
  Fixture f(2);
  auto pipelines = std::make_unique<CountingPipelines>(2);
  HeldRun hold;
  std::mutex lost_mu;
  float lost_seen = 0;
  f.step->run(
      pipelines->input(),
      [&](ReplicaContext& ctx, ReplicaRun& run, const Element& e) {
        const bool lost = hold.maybe_hold(ctx.local_replica_id());
        if (lost) {
          std::lock_guard lock(lost_mu);
          lost_seen = value(e);  // after run() returned and the pipelines are gone
        }
        train_on(run, e);
      },
      true);
  const int h = hold.held();
  ASSERT_GE(h, 0) << "no run was held";
  EXPECT_TRUE(f.committed(h).backup) << "the held replica was committed by its backup";
  EXPECT_EQ(f.committed(h).seen, static_cast<float>(10 * (h + 1) + 1));
  EXPECT_EQ(pipelines->counts(), std::vector<int>({1, 1})) << "the backup did not pull";
  f.expect_updated_by(11.0f + 21.0f);
  EXPECT_GE(f.step->stats().backup_wins, 1u);
  pipelines.reset();
  hold.release();
  f.step->settle();
  std::lock_guard lock(lost_mu);
  EXPECT_EQ(lost_seen, static_cast<float>(10 * (h + 1) + 1));
}

TEST(ReplicatedStep, AFailedPullFailsTheStepWithItsErrorAndNoBackupPullsPastIt) {
  Fixture f(2);
  TaskPool& pool = f.strategy->task_pool();
  std::mutex mu;
  std::condition_variable cv;
  bool backup_started = false;
  pool.set_run_hook([&](int kind, int task, int, bool backup, uint64_t) {
    if (kind != 0 || task != 1 || !backup) return;
    std::lock_guard lock(mu);
    backup_started = true;
    cv.notify_all();
  });
  CountingPipelines p(2);
  p.bad_replica = 1;
  p.bad = 2;
  int step = 1;
  // Replica 1's failing pull waits for a backup of replica 1, which then finds the pull under
  // way and waits for its outcome.
  auto input = [&] {
    return StepInput([&](int r) {
      if (r == 1 && step == 2) {
        std::unique_lock lock(mu);
        cv.wait_for(lock, kPatience, [&] { return backup_started; });
      }
      return p.pull(r);
    });
  };
  auto fn = [](ReplicaContext&, ReplicaRun& run, const Element& e) { train_on(run, e); };
  f.step->run(input(), fn, true);
  step = 2;
  try {
    f.step->run(input(), fn, true);
    FAIL() << "the step with the corrupt record returned";
  } catch (const DataLoss& e) {
    EXPECT_STREQ(e.what(), "DataLoss: corrupt record at pull 2");
  }
  {
    std::lock_guard lock(mu);
    EXPECT_TRUE(backup_started);
  }
  EXPECT_EQ(p.counts()[1], 2) << "the backup did not pull the element after the corrupt one";
  step = 3;
  f.step->run(input(), fn, true);
  EXPECT_EQ(f.committed(1).seen, 23.0f);
  pool.set_run_hook({});
}

}  // namespace
}  // namespace lockstep::distribute
