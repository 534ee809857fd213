// Ranks bound by the launcher (run under `mpirun --bind-to core -np 2`) take the union of the
// bindings of the job's ranks on their host when the world communicator is made; with
// LOCKSTEP_RANK_AFFINITY=launcher they keep their own. The expected union is gathered here with
// MPI directly, before Lockstep sees any mask.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distribute/collectives/mpi_communicator.h"
#include "lockstep/distribute/collective.h"

namespace lockstep::distribute {
namespace {

struct Observed {
  cpu_set_t launcher;       // this rank's mask as the launcher set it
  cpu_set_t job;            // the union of the masks of the ranks on this host
  cpu_set_t main_after;     // the main thread's mask once the communicator exists
  cpu_set_t early_after;    // a thread started before the communicator, afterwards
  cpu_set_t started_after;  // a thread started after the communicator
  int widened = -1;
};
Observed g;

bool keep_binding() {
  const char* v = std::getenv("LOCKSTEP_RANK_AFFINITY");
  return v != nullptr && std::string(v) == "launcher";
}

TEST(RankAffinity, TheLauncherBoundEachRankToLessThanTheJobsCpus) {
  // Without this the test below could not tell a widening from none.
  EXPECT_LT(CPU_COUNT(&g.launcher), CPU_COUNT(&g.job));
}

TEST(RankAffinity, ThreadsOfABoundRankTakeTheJobsCpusUnlessTurnedOff) {
  const cpu_set_t& want = keep_binding() ? g.launcher : g.job;
  EXPECT_TRUE(CPU_EQUAL(&g.main_after, &want))
      << "main thread: " << CPU_COUNT(&g.main_after) << " CPUs, expected " << CPU_COUNT(&want);
  EXPECT_TRUE(CPU_EQUAL(&g.early_after, &want))
      << "thread started before: " << CPU_COUNT(&g.early_after) << " CPUs";
  EXPECT_TRUE(CPU_EQUAL(&g.started_after, &want))
      << "thread started after: " << CPU_COUNT(&g.started_after) << " CPUs";
  if (keep_binding())
    EXPECT_EQ(g.widened, 0);
  else
    EXPECT_GE(g.widened, 2);  // the main thread and the early one, besides MPI's own
}

cpu_set_t affinity_of(pid_t tid) {
  cpu_set_t s;
  CPU_ZERO(&s);
  sched_getaffinity(tid, sizeof s, &s);
  return s;
}

}  // namespace
}  // namespace lockstep::distribute

int main(int argc, char** argv) {
  using namespace lockstep::distribute;
  ::testing::InitGoogleTest(&argc, argv);
  MpiContext& mpi = mpi_initialize(&argc, &argv);
  int failed = 0;
  {
    g.launcher = affinity_of(0);
    // The expected union, from every rank's mask and host name (one host under CTest).
    struct Wire {
      char host[256];
      cpu_set_t cpus;
    } mine{};
    gethostname(mine.host, sizeof mine.host - 1);
    mine.cpus = g.launcher;
    std::vector<Wire> all(static_cast<size_t>(mpi.world_size()));
    MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
    CPU_ZERO(&g.job);
    for (const Wire& w : all)
      if (std::strcmp(w.host, mine.host) == 0) CPU_OR(&g.job, &g.job, &w.cpus);

    // A thread that exists before the communicator, parked until it reports its mask.
    std::mutex mu;
    std::condition_variable cv;
    pid_t early_tid = 0;
    bool quit = false;
    std::thread early([&] {
      std::unique_lock<std::mutex> lock(mu);
      early_tid = static_cast<pid_t>(syscall(SYS_gettid));
      cv.notify_all();
      cv.wait(lock, [&] { return quit; });
    });
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return early_tid != 0; });
    }

    std::shared_ptr<Communicator> world = mpi.world({.timeout_seconds = 60.0});
    auto* comm = dynamic_cast<MpiCommunicator*>(world.get());
    g.widened = comm ? comm->widened_threads() : -1;
    g.main_after = affinity_of(0);
    g.early_after = affinity_of(early_tid);
    std::thread([] { g.started_after = affinity_of(0); }).join();
    {
      std::lock_guard<std::mutex> lock(mu);
      quit = true;
    }
    cv.notify_all();
    early.join();

    if (mpi.world_rank() != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
    }
    failed = RUN_ALL_TESTS();
    failed = world->all_reduce_value<int32_t>(failed != 0 ? 1 : 0, ReduceOp::MAX);
  }
  mpi.finalize();
  return failed;
}
