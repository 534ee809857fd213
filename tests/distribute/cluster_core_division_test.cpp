// How local workers (mpirun's local ranks) divide a host's cores, how that is described, and
// check_cluster_can_connect: a cluster of several workers needs an MPI launcher. Every environment
// is an Environment map, so nothing depends on the process environment.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/distribute/cluster_resolver.h"
#include "lockstep/distribute/topology.h"

namespace lockstep {
namespace {

Environment open_mpi(int rank, int size) {
  return Environment::fixed({{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
                             {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
                             {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank)},
                             {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(size)}});
}

std::vector<int> cores_of(const ClusterResolver& resolver) {
  std::vector<int> out;
  for (const DeviceSpec& d : resolver.local_devices())
    out.insert(out.end(), d.cores.begin(), d.cores.end());
  return out;
}

TEST(CoreDivision, LocalRanksOutnumberingTheCoresGetOneCoreAndOneReplicaEach) {
  // mpirun --oversubscribe -np 3 on 2 cores: ranks 0, 1, 2 take cores 0, 1, 0.
  const std::vector<std::vector<int>> expected = {{0}, {1}, {0}};
  for (int rank = 0; rank < 3; ++rank) {
    MpiClusterResolver resolver(open_mpi(rank, 3), {.cores = {0, 1}});
    EXPECT_EQ(resolver.num_accelerators(), 1) << "rank " << rank;
    EXPECT_EQ(cores_of(resolver), expected[static_cast<size_t>(rank)]) << "rank " << rank;
    const CoreDivision d = resolver.core_division();
    EXPECT_EQ(d.local_workers, 3);
    EXPECT_EQ(d.local_worker, rank);
    EXPECT_EQ(d.visible_cores, (std::vector<int>{0, 1}));
    EXPECT_EQ(d.cores, expected[static_cast<size_t>(rank)]);
    EXPECT_EQ(d.to_string(),
              "3 local workers on 2 cores [0,1]: more workers than cores, so one core (one "
              "replica) each, round-robin (local worker 0: core 0, 1: core 1, 2: core 0); this "
              "is local worker " +
                  std::to_string(rank) + " on core " + std::to_string(rank % 2));
  }
}

TEST(CoreDivision, FiveRanksOnThreeCoresWrapRoundRobin) {
  const std::vector<int> expected = {4, 6, 9, 4, 6};
  for (int rank = 0; rank < 5; ++rank) {
    MpiClusterResolver resolver(open_mpi(rank, 5), {.cores = {4, 6, 9}});
    ASSERT_EQ(resolver.num_accelerators(), 1);
    EXPECT_EQ(cores_of(resolver), std::vector<int>{expected[static_cast<size_t>(rank)]});
  }
}

TEST(CoreDivision, EnoughCoresAreSharedContiguously) {
  MpiClusterResolver resolver(open_mpi(1, 3), {.cores = {0, 1, 2, 3, 4, 5}});
  EXPECT_EQ(cores_of(resolver), (std::vector<int>{2, 3}));
  EXPECT_EQ(resolver.core_division().to_string(),
            "3 local workers on 6 cores [0,1,2,3,4,5]: a contiguous share each (local worker 0: "
            "cores 0,1, 1: cores 2,3, 2: cores 4,5); this is local worker 1 on cores 2,3");
}

TEST(CoreDivision, ACoreBoundByTheLauncherIsKept) {
  MpiClusterResolver resolver(open_mpi(1, 2), {.cores = {7}});
  EXPECT_EQ(cores_of(resolver), std::vector<int>{7});
  EXPECT_EQ(resolver.core_division().to_string(),
            "2 local workers on 1 core [7]: one core each (the launcher bound every worker to "
            "one); this is local worker 1 on core 7");
}

TEST(CoreDivision, LockstepDevicesStillSetsTheReplicaCount) {
  Environment env = Environment::fixed({{"OMPI_COMM_WORLD_RANK", "2"},
                                        {"OMPI_COMM_WORLD_SIZE", "3"},
                                        {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
                                        {"LOCKSTEP_DEVICES", "cpu:2"}});
  MpiClusterResolver resolver(env, {.cores = {0, 1}});
  EXPECT_EQ(resolver.num_accelerators(), 2);
}

TEST(CoreDivision, TopologyPrintsTheDivisionOnlyWithSeveralLocalWorkers) {
  MpiClusterResolver three(open_mpi(2, 3), {.cores = {0, 1}});
  const Topology t = initialize_system(three);
  EXPECT_EQ(t.num_replicas_in_sync(), 3);
  EXPECT_EQ(t.to_string(), "3 workers (this is worker 2), 1 local replica, 3 in sync\n" +
                               three.core_division().to_string() +
                               "\n  /job:worker/task:2/device:cpu:0  cores 0\n");
  EXPECT_EQ(t.to_json()["core_division"]["local_workers"], 3);
  LocalCpuResolver alone({.cores = {0, 1}}, Environment::fixed({}));
  EXPECT_EQ(initialize_system(alone).to_string().find("local workers"), std::string::npos);
  EXPECT_EQ(alone.core_division().local_workers, 1);
  EXPECT_EQ(alone.core_division().cores, (std::vector<int>{0, 1}));
}

// ---------------------------------------------------------------- check_cluster_can_connect

template <typename ErrorType, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ErrorType& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(CheckClusterCanConnect, TfConfigClusterWithoutMpiSaysHowToLaunchIt) {
  auto resolver = TFConfigClusterResolver::from_string(
      R"({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}})",
      {.cores = {0}}, Environment::fixed({}));
  const std::string message = error_of<FailedPrecondition>(
      [&] { check_cluster_can_connect(resolver, Environment::fixed({})); });
  EXPECT_NE(message.find("TF_CONFIG describes 2 workers (this is worker 1)"), std::string::npos)
      << message;
  EXPECT_NE(message.find("mpirun -np 2 --host a,b"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
}

TEST(CheckClusterCanConnect, SlurmStepWithoutPmiSaysSrunMpi) {
  Environment env = Environment::fixed({{"SLURM_PROCID", "1"},
                                        {"SLURM_STEP_ID", "0"},
                                        {"SLURM_STEP_NUM_TASKS", "2"},
                                        {"SLURM_STEP_NODELIST", "n[1-2]"}});
  SlurmClusterResolver resolver(env, {.cores = {0}});
  const std::string message =
      error_of<FailedPrecondition>([&] { check_cluster_can_connect(resolver, env); });
  EXPECT_NE(message.find("SLURM describes a job step of 2 tasks (this is task 1)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("srun --mpi=pmix -n 2"), std::string::npos) << message;
}

TEST(CheckClusterCanConnect, AcceptsMpiLaunchedAndSingleWorkerClusters) {
  MpiClusterResolver mpi(open_mpi(0, 2), {.cores = {0, 1}});
  EXPECT_NO_THROW(check_cluster_can_connect(mpi, open_mpi(0, 2)));
  auto one = TFConfigClusterResolver::from_string(
      R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})", {.cores = {0}},
      Environment::fixed({}));
  EXPECT_NO_THROW(check_cluster_can_connect(one, Environment::fixed({})));
  LocalCpuResolver local({.cores = {0}}, Environment::fixed({}));
  EXPECT_NO_THROW(check_cluster_can_connect(local, Environment::fixed({})));
}

}  // namespace
}  // namespace lockstep
