#include "distribute/collectives/host_rank_placement.h"

#include "core/cpu_affinity.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace lockstep::distribute::detail {
namespace {

// The seats live in a shared segment between processes; moves act on thread ids, so a thread of
// this process stands in for a peer rank (what matters to the placement is its seat and its tid).
struct Seats {
  explicit Seats(int size) : bytes(HostRankPlacement::seats_bytes(size)) {
    data = static_cast<std::byte*>(std::aligned_alloc(64, bytes));
    std::fill(data, data + bytes, std::byte{0});
  }
  ~Seats() { std::free(data); }
  size_t bytes;
  std::byte* data;
};

cpu_set_t affinity_of(pid_t tid) {
  cpu_set_t s;
  CPU_ZERO(&s);
  EXPECT_EQ(sched_getaffinity(tid, sizeof s, &s), 0);
  return s;
}

cpu_set_t only(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  return s;
}

bool has_mask(pid_t tid, const cpu_set_t& expected) {
  const cpu_set_t mask = affinity_of(tid);
  return CPU_EQUAL(&mask, &expected);
}

// Two looks at the late peers at generation 0: the first samples their run time, the second
// judges it.
void look_twice(HostRankPlacement& waiter, bool busy) {
  waiter.while_waiting(0, busy);
  waiter.while_waiting(0, busy);
}

// A peer rank on a thread of its own. It publishes its seat (with the affinity it starts with)
// and then runs what it is given, one call at a time; in between it blocks on a condition
// variable — asleep, which is how a descheduled rank looks to its peers.
class Peer {
 public:
  Peer(Seats& seats, int rank, int size) {
    thread_ = std::thread([this, &seats, rank, size] {
      HostRankPlacement p(seats.data, rank, size, 1024);
      std::unique_lock<std::mutex> lock(mu_);
      tid_ = static_cast<pid_t>(syscall(SYS_gettid));
      placement_ = &p;
      ready_ = true;
      cv_.notify_all();
      for (;;) {
        cv_.wait(lock, [&] { return job_ != nullptr || quit_; });
        if (job_ == nullptr) return;
        job_(p);
        job_ = nullptr;
        cv_.notify_all();
      }
    });
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return ready_; });
  }
  ~Peer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  pid_t tid() const { return tid_; }
  // Runs fn(placement) on the calling thread, as a rank whose barriers come from another thread
  // than the one that published its seat (the peer's own thread stays blocked).
  void run_elsewhere(const std::function<void(HostRankPlacement&)>& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    fn(*placement_);
  }
  // Runs fn(placement) on the peer's thread and waits for it.
  void run(std::function<void(HostRankPlacement&)> fn) {
    std::unique_lock<std::mutex> lock(mu_);
    job_ = std::move(fn);
    cv_.notify_all();
    cv_.wait(lock, [&] { return job_ == nullptr; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  pid_t tid_ = 0;
  bool ready_ = false;
  bool quit_ = false;
  std::function<void(HostRankPlacement&)> job_;
  HostRankPlacement* placement_ = nullptr;
  std::thread thread_;
};

// The CPUs this process may run on, and one of them to pin the test's own thread to.
std::vector<int> usable_cpus() {
  cpu_set_t s = affinity_of(0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &s)) cpus.push_back(c);
  return cpus;
}

class HostRankPlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    original_ = affinity_of(0);
    cpus_ = usable_cpus();
  }
  void TearDown() override { sched_setaffinity(0, sizeof original_, &original_); }
  void pin_to(int cpu) {
    const cpu_set_t s = only(cpu);
    ASSERT_EQ(sched_setaffinity(0, sizeof s, &s), 0);
  }
  // Rank 0 on this thread, pinned to `cpu`, arrived at generation 0.
  std::unique_ptr<HostRankPlacement> waiter_on(int cpu, Seats& seats) {
    pin_to(cpu);
    auto me = std::make_unique<HostRankPlacement>(seats.data, 0, 2, static_cast<int>(cpus_.size()));
    me->arrive(0);
    return me;
  }
  cpu_set_t original_{};
  std::vector<int> cpus_;
};

TEST(HostRankPlacementRule, APeerIsDescheduledBelowAQuarterOfTheInterval) {
  EXPECT_TRUE(HostRankPlacement::descheduled(0, 100'000));
  EXPECT_TRUE(HostRankPlacement::descheduled(24'999, 100'000));
  EXPECT_FALSE(HostRankPlacement::descheduled(25'000, 100'000));
  EXPECT_FALSE(HostRankPlacement::descheduled(100'000, 100'000));
  // No time passed: nothing to judge by.
  EXPECT_FALSE(HostRankPlacement::descheduled(0, 0));
}

TEST(HostRankPlacementRule, ReadsAThreadsRunTimeFromSchedstat) {
  const int fd =
      HostRankPlacement::open_schedstat(getpid(), static_cast<pid_t>(syscall(SYS_gettid)));
  ASSERT_GE(fd, 0);
  const int64_t before = HostRankPlacement::read_run_ns(fd);
  ASSERT_GE(before, 0);
  // Work for much longer than a scheduler tick, so the kernel has accounted some of it.
  volatile uint64_t x = 1;
  for (int i = 0; i < 200'000'000; ++i) x = x * 6364136223846793005ull + 1;
  const int64_t after = HostRankPlacement::read_run_ns(fd);
  EXPECT_GT(after, before);
  close(fd);
  EXPECT_LT(HostRankPlacement::open_schedstat(getpid(), 0), 0);
}

TEST_F(HostRankPlacementTest,
       AWaiterPullsAnAsleepLatePeerOntoItsCpuAndItsThreadsStartOnItsMaskUntilItRestoresIt) {
  Seats seats(2);
  Peer peer(seats, 1, 2);
  const int here = cpus_.front();
  auto me = waiter_on(here, seats);
  me->set_sleeping(true);
  // The peer is blocked and has not arrived at generation 0: it ran nothing between the looks.
  look_twice(*me, true);
  if (cpus_.size() < 2) {
    // One CPU: no move can help, and none is made.
    EXPECT_EQ(me->pulls(), 0u);
    return;
  }
  EXPECT_EQ(me->pulls(), 1u);
  EXPECT_TRUE(has_mask(peer.tid(), only(here)));
  // At most one pull per barrier.
  me->while_waiting(0, true);
  EXPECT_EQ(me->pulls(), 1u);
  // Until then a thread the peer starts would inherit the one CPU for good; the threads Lockstep
  // starts take the rank's own mask.
  cpu_set_t inherited, adopted;
  peer.run([&](HostRankPlacement&) {
    std::thread([&] { inherited = affinity_of(0); }).join();
    std::thread([&] {
      os::adopt_thread_start_mask();
      adopted = affinity_of(0);
    }).join();
  });
  const cpu_set_t narrowed = only(here);
  EXPECT_TRUE(CPU_EQUAL(&inherited, &narrowed)) << "a plain thread inherits the narrowed mask";
  EXPECT_TRUE(CPU_EQUAL(&adopted, &original_))
      << "a thread Lockstep starts runs on " << CPU_COUNT(&adopted) << " CPUs, the rank's mask has "
      << CPU_COUNT(&original_);
  // Past its next barrier the peer may run anywhere its own mask allows again.
  uint64_t restores = 0;
  peer.run([&](HostRankPlacement& p) {
    p.arrive(0);
    p.pass();
    restores = p.restores();
  });
  EXPECT_TRUE(has_mask(peer.tid(), original_));
  EXPECT_EQ(restores, 1u);
}

TEST_F(HostRankPlacementTest, TheRestoreReachesTheMovedThreadWhicheverThreadPassesNext) {
  if (cpus_.size() < 2) {
    // Nothing is moved on one CPU (see above), so there is nothing to restore.
    Seats seats(2);
    HostRankPlacement one(seats.data, 0, 2, 1);
    look_twice(one, true);
    EXPECT_EQ(one.pulls(), 0u);
    return;
  }
  Seats seats(2);
  Peer peer(seats, 1, 2);
  const int here = cpus_.front();
  auto me = waiter_on(here, seats);
  look_twice(*me, true);
  ASSERT_EQ(me->pulls(), 1u);
  ASSERT_TRUE(has_mask(peer.tid(), only(here)));
  // The rank's next barrier is passed by another thread (here: this one, pinned to `here`): the
  // moved thread gets its mask back, and the passing thread keeps its own.
  uint64_t restores = 0;
  peer.run_elsewhere([&](HostRankPlacement& p) {
    p.pass();
    restores = p.restores();
  });
  EXPECT_EQ(restores, 1u);
  EXPECT_TRUE(has_mask(peer.tid(), original_));
  EXPECT_TRUE(has_mask(static_cast<pid_t>(syscall(SYS_gettid)), only(here)));
}

TEST_F(HostRankPlacementTest, NothingMovesOnAQuietMachineOrForAPeerThatHasArrived) {
  Seats seats(2);
  Peer peer(seats, 1, 2);
  auto me = waiter_on(cpus_.front(), seats);
  look_twice(*me, false);
  EXPECT_EQ(me->pulls(), 0u);
  // The peer arrives at generation 0 (and blocks again): it is not late.
  peer.run([](HostRankPlacement& p) { p.arrive(0); });
  look_twice(*me, true);
  EXPECT_EQ(me->pulls(), 0u);
  EXPECT_TRUE(has_mask(peer.tid(), original_));
}

TEST_F(HostRankPlacementTest, APeerBoundToAnotherCpuIsNeverPulled) {
  Seats seats(2);
  // As Open MPI binds 2 ranks: each to a core of its own. The peer's thread inherits the binding
  // from the thread that starts it (with one CPU it is this CPU, and nothing moves at all).
  const cpu_set_t elsewhere = only(cpus_.back());
  ASSERT_EQ(sched_setaffinity(0, sizeof elsewhere, &elsewhere), 0);
  Peer peer(seats, 1, 2);
  auto me = waiter_on(cpus_.front(), seats);
  look_twice(*me, true);
  EXPECT_EQ(me->pulls(), 0u);
  EXPECT_TRUE(has_mask(peer.tid(), elsewhere));
}

TEST_F(HostRankPlacementTest, TheLastArrivalWakesASleeperThatSharesItsCpuElsewhere) {
  Seats seats(2);
  const int here = cpus_.front();
  Peer peer(seats, 1, 2);
  // The peer arrives at generation 0 on `here` and goes to sleep there.
  peer.run([&](HostRankPlacement& p) {
    const cpu_set_t s = only(here);
    sched_setaffinity(0, sizeof s, &s);
    p.arrive(0);
    p.set_sleeping(true);
  });
  auto me = waiter_on(here, seats);
  // Quiet: the sleeper stays where it is.
  me->before_wake(false);
  EXPECT_EQ(me->placements(), 0u);
  me->before_wake(true);
  if (cpus_.size() < 2) {
    EXPECT_EQ(me->placements(), 0u);
    return;
  }
  EXPECT_EQ(me->placements(), 1u);
  cpu_set_t expected = original_;
  CPU_CLR(here, &expected);
  EXPECT_TRUE(has_mask(peer.tid(), expected));
  // Woken, past the barrier, it runs anywhere its own mask allows again.
  peer.run([](HostRankPlacement& p) {
    p.set_sleeping(false);
    p.pass();
  });
  EXPECT_TRUE(has_mask(peer.tid(), original_));
}

TEST_F(HostRankPlacementTest, AsleepRanksAreNotAwake) {
  Seats seats(3);
  Peer peer(seats, 1, 3);
  HostRankPlacement me(seats.data, 0, 3, 1024);
  // Rank 2 has not published a seat: it is not counted.
  EXPECT_EQ(me.awake_ranks(), 2);
  peer.run([](HostRankPlacement& p) { p.set_sleeping(true); });
  EXPECT_EQ(me.awake_ranks(), 1);
}

}  // namespace
}  // namespace lockstep::distribute::detail
