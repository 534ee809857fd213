#include "distribute/collectives/rank_affinity.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/core/error.h"

namespace lockstep::distribute::detail {
namespace {

cpu_set_t cpus(std::initializer_list<int> ids) {
  cpu_set_t s;
  CPU_ZERO(&s);
  for (int id : ids) CPU_SET(id, &s);
  return s;
}

cpu_set_t affinity_of(pid_t tid) {
  cpu_set_t s;
  CPU_ZERO(&s);
  EXPECT_EQ(sched_getaffinity(tid, sizeof s, &s), 0);
  return s;
}

// A thread that sets its own affinity, publishes its id, and sleeps until the test ends.
class ParkedThread {
 public:
  explicit ParkedThread(const cpu_set_t& mask) {
    thread_ = std::thread([this, mask] {
      sched_setaffinity(0, sizeof mask, &mask);
      std::unique_lock<std::mutex> lock(mu_);
      tid_ = static_cast<pid_t>(syscall(SYS_gettid));
      cv_.notify_all();
      cv_.wait(lock, [&] { return quit_; });
    });
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return tid_ != 0; });
  }
  ~ParkedThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  pid_t tid() const { return tid_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  pid_t tid_ = 0;
  bool quit_ = false;
  std::thread thread_;
};

TEST(RankAffinity, TheJobsCpusOnAHostAreTheUnionOfItsRanksBindingsThere) {
  const std::vector<RankCpus> ranks = {
      {"a", cpus({0})}, {"a", cpus({3})}, {"b", cpus({1})}, {"a", cpus({3, 5})}};
  const cpu_set_t on_a = job_cpus_on_host(ranks, "a");
  const cpu_set_t want_a = cpus({0, 3, 5});
  EXPECT_TRUE(CPU_EQUAL(&on_a, &want_a));
  const cpu_set_t on_b = job_cpus_on_host(ranks, "b");
  const cpu_set_t want_b = cpus({1});
  EXPECT_TRUE(CPU_EQUAL(&on_b, &want_b));
  const cpu_set_t on_c = job_cpus_on_host(ranks, "c");
  EXPECT_EQ(CPU_COUNT(&on_c), 0);
}

TEST(RankAffinity, OnlyThreadsBoundExactlyAsTheLauncherBoundTheRankAreWidened) {
  const cpu_set_t own = affinity_of(0);
  std::vector<int> ids;
  for (int c = 0; c < CPU_SETSIZE && ids.size() < 2; ++c)
    if (CPU_ISSET(c, &own)) ids.push_back(c);
  if (ids.size() < 2) GTEST_SKIP() << "needs two CPUs in the process's affinity";
  const cpu_set_t bound = cpus({ids[0]}), elsewhere = cpus({ids[1]}), job = cpus({ids[0], ids[1]});
  ParkedThread as_bound(bound), pinned_elsewhere(elsewhere);

  EXPECT_EQ(widen_threads(bound, job), 1);

  const cpu_set_t widened = affinity_of(as_bound.tid());
  EXPECT_TRUE(CPU_EQUAL(&widened, &job));
  const cpu_set_t kept = affinity_of(pinned_elsewhere.tid());
  EXPECT_TRUE(CPU_EQUAL(&kept, &elsewhere));
  const cpu_set_t mine = affinity_of(0);
  EXPECT_TRUE(CPU_EQUAL(&mine, &own));
}

class RankAffinityEnvironment : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("LOCKSTEP_RANK_AFFINITY"); }
};

TEST_F(RankAffinityEnvironment, DefaultsToTheJobsCpusAndTakesLauncherToKeepTheBinding) {
  unsetenv("LOCKSTEP_RANK_AFFINITY");
  EXPECT_EQ(rank_affinity_from_environment(), RankAffinity::job);
  setenv("LOCKSTEP_RANK_AFFINITY", "", 1);
  EXPECT_EQ(rank_affinity_from_environment(), RankAffinity::job);
  setenv("LOCKSTEP_RANK_AFFINITY", "job", 1);
  EXPECT_EQ(rank_affinity_from_environment(), RankAffinity::job);
  setenv("LOCKSTEP_RANK_AFFINITY", "launcher", 1);
  EXPECT_EQ(rank_affinity_from_environment(), RankAffinity::launcher);
}

TEST_F(RankAffinityEnvironment, AnotherValueIsRefusedNamingTheVariableAndItsValues) {
  setenv("LOCKSTEP_RANK_AFFINITY", "none", 1);
  try {
    rank_affinity_from_environment();
    FAIL() << "accepted LOCKSTEP_RANK_AFFINITY=none";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("LOCKSTEP_RANK_AFFINITY"), std::string::npos) << what;
    EXPECT_NE(what.find("\"launcher\""), std::string::npos) << what;
    EXPECT_NE(what.find("\"none\""), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace lockstep::distribute::detail
