// Resolvers that read a launcher's description of the cluster: TF_CONFIG, SLURM, MPI, and the
// auto-detection that picks among them. Every environment is an Environment map, so the tests do
// not depend on (or change) the process environment.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/distribute/cluster_resolver.h"

namespace lockstep {
namespace {

using Strings = std::vector<std::string>;

// Runs `make` and checks it throws ErrorType whose message contains every one of `parts`.
template <typename ErrorType, typename Make>
void expect_error_mentioning(Make make, const Strings& parts) {
  try {
    make();
    ADD_FAILURE() << "expected an error mentioning " << parts.front();
  } catch (const ErrorType& error) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(error.what()).find(part), std::string::npos)
          << "missing \"" << part << "\" in: " << error.what();
    }
  }
}

const LocalDeviceOptions kTwoCores{.cores = {0, 1}};
const Environment kNoVariables = Environment::fixed({});

// ---------------------------------------------------------------- TF_CONFIG

TEST(TFConfigClusterResolver, ReadsClusterTaskAndRpcLayer) {
  auto resolver = TFConfigClusterResolver::from_string(
      R"({"cluster": {"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2222"]},
          "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc",
          "environment": "cloud"})",
      kTwoCores, kNoVariables);
  EXPECT_EQ(resolver.task_type(), "worker");
  EXPECT_EQ(resolver.task_id(), 1);
  EXPECT_EQ(resolver.num_workers(), 3);
  EXPECT_EQ(resolver.worker_index(), 2);  // after the chief
  EXPECT_EQ(resolver.master(), "grpc://w1:2222");
  EXPECT_EQ(resolver.rpc_layer(), "grpc");
  EXPECT_EQ(resolver.cluster_spec().jobs.at("worker"), (Strings{"w0:2222", "w1:2222"}));
  EXPECT_EQ(resolver.cluster_spec().to_json(),
            nlohmann::json::parse(R"({"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2222"]})"));
  ASSERT_EQ(resolver.num_accelerators(), 2);
  EXPECT_EQ(resolver.local_devices()[1].name(), "/job:worker/task:1/device:cpu:1");
}

TEST(TFConfigClusterResolver, ChiefIsWorkerZero) {
  auto resolver = TFConfigClusterResolver::from_string(
      R"({"cluster": {"chief": ["c0:1"], "worker": ["w0:1"]}, "task": {"type": "chief", "index": 0}})",
      kTwoCores, kNoVariables);
  EXPECT_EQ(resolver.worker_index(), 0);
  EXPECT_EQ(resolver.master(), "c0:1");  // no rpc_layer: a bare address
}

TEST(TFConfigClusterResolver, ReadsTheEnvironmentVariable) {
  TFConfigClusterResolver resolver(
      Environment::fixed({{"TF_CONFIG", R"({"cluster": {"worker": ["a:1", "b:1", "c:1"]},
                                     "task": {"type": "worker", "index": 2}})"}}),
      kTwoCores);
  EXPECT_EQ(resolver.task_id(), 2);
  EXPECT_EQ(resolver.num_workers(), 3);
}

TEST(TFConfigClusterResolver, UnsetIsNotFound) {
  EXPECT_THROW(TFConfigClusterResolver(kNoVariables, kTwoCores), NotFound);
}

TEST(TFConfigClusterResolver, RejectsMalformedConfigNamingTheFieldAndValue) {
  const std::vector<std::pair<std::string, Strings>> cases = {
      {"{not json", {"not valid JSON", "{not json"}},
      {"[1, 2]", {"JSON object", "[1,2]"}},
      {R"({"task": {"type": "worker", "index": 0}})", {"missing field \"cluster\""}},
      {R"({"cluster": {"worker": ["a:1"]}})", {"missing field \"task\""}},
      {R"({"cluster": {}, "task": {"type": "worker", "index": 0}})", {"\"cluster\"", "{}"}},
      {R"({"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}})",
       {"cluster.worker", "\"a:1\""}},
      {R"({"cluster": {"worker": ["a:1", 7]}, "task": {"type": "worker", "index": 0}})",
       {"cluster.worker", "7"}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"index": 0}})", {"task.type"}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}})",
       {"task.type \"chief\""}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker"}})", {"task.index"}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "0"}})",
       {"task.index", "\"0\""}},
      {R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 2}})",
       {"task.index=2", "[0, 2)"}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1}})",
       {"task.index=-1"}},
      {R"({"cluster": {"worker": ["a:1"], "ps": ["p:1"]}, "task": {"type": "worker", "index": 0}})",
       {"\"ps\"", "not supported"}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}, "rpc_layer": 1})",
       {"rpc_layer"}},
  };
  for (const auto& [config, parts] : cases) {
    SCOPED_TRACE(config);
    expect_error_mentioning<InvalidArgument>(
        [&] { TFConfigClusterResolver::from_string(config, kTwoCores, kNoVariables); }, parts);
  }
}

// ---------------------------------------------------------------- SLURM

TEST(ExpandSlurmNodelist, ExpandsRangesListsAndPadding) {
  const std::vector<std::pair<std::string, Strings>> cases = {
      {"node7", {"node7"}},
      {"node[01-03],gpu7", {"node01", "node02", "node03", "gpu7"}},
      {"a[1,3-4]", {"a1", "a3", "a4"}},
      {"n[8-11]", {"n8", "n9", "n10", "n11"}},
      {"n[098-101]", {"n098", "n099", "n100", "n101"}},
      {"r[1-2]n[3,5]", {"r1n3", "r1n5", "r2n3", "r2n5"}},
      {"x[1-2]-ib", {"x1-ib", "x2-ib"}},
      {"a,b[1-2],c", {"a", "b1", "b2", "c"}},
  };
  for (const auto& [nodelist, hosts] : cases) {
    EXPECT_EQ(expand_slurm_nodelist(nodelist), hosts) << nodelist;
  }
}

TEST(ExpandSlurmNodelist, RejectsMalformedListsNamingThem) {
  for (const char* nodelist : {"", "a,,b", "n[1-", "n]1[", "n[3-1]", "n[a]", "n[]", "n[1,]"}) {
    expect_error_mentioning<InvalidArgument>([&] { expand_slurm_nodelist(nodelist); },
                                             {"\"" + std::string(nodelist) + "\""});
  }
}

TEST(ExpandSlurmNodelist, RefusesListsTooLargeToBeRealInsteadOfExhaustingMemory) {
  EXPECT_THROW(expand_slurm_nodelist("a[1-100000]b[1-100000]"), InvalidArgument);
  EXPECT_THROW(expand_slurm_tasks_per_node("1(x999999),1(x999999)"), InvalidArgument);
}

TEST(ExpandSlurmTasksPerNode, ExpandsRepeatCounts) {
  EXPECT_EQ(expand_slurm_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_slurm_tasks_per_node("4"), (std::vector<int>{4}));
  for (const char* bad : {"", "2(3)", "x", "2(x)", "1,"}) {
    EXPECT_THROW(expand_slurm_tasks_per_node(bad), InvalidArgument) << bad;
  }
}

Environment slurm_env(std::map<std::string, std::string> overrides = {}) {
  std::map<std::string, std::string> env = {
      {"SLURM_PROCID", "3"},
      {"SLURM_NTASKS", "4"},
      {"SLURM_JOB_NODELIST", "node[01-02]"},
      {"SLURM_TASKS_PER_NODE", "2(x2)"},
      {"SLURM_LOCALID", "1"},
      {"SLURM_STEP_ID", "0"},
  };
  for (auto& [name, value] : overrides) env[name] = value;
  return Environment::fixed(env);
}

TEST(SlurmClusterResolver, BuildsTheClusterFromTheStepEnvironment) {
  SlurmClusterResolver resolver(slurm_env(), {.cores = {0, 1, 2, 3}});
  EXPECT_EQ(resolver.task_type(), "worker");
  EXPECT_EQ(resolver.task_id(), 3);
  EXPECT_EQ(resolver.num_workers(), 4);
  EXPECT_EQ(resolver.cluster_spec().jobs.at("worker"),
            (Strings{"node01:8888", "node01:8889", "node02:8888", "node02:8889"}));
  EXPECT_EQ(resolver.master(), "node02:8889");
  EXPECT_EQ(resolver.rpc_layer(), "mpi");
  // Local task 1 of 2 takes the second half of the node's cores.
  const auto devices = resolver.local_devices();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].cores, std::vector<int>{2});
  EXPECT_EQ(devices[1].cores, std::vector<int>{3});
  EXPECT_EQ(devices[0].name(), "/job:worker/task:3/device:cpu:0");
}

TEST(SlurmClusterResolver, CpusPerTaskSelectsThisTasksCores) {
  SlurmClusterResolver resolver(slurm_env({{"SLURM_CPUS_PER_TASK", "2"}}),
                                {.cores = {0, 1, 2, 3, 4, 5, 6, 7}});
  const auto devices = resolver.local_devices();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].cores, std::vector<int>{2});
  EXPECT_EQ(devices[1].cores, std::vector<int>{3});
}

TEST(SlurmClusterResolver, KeepsCoresSlurmAlreadyBound) {
  SlurmClusterResolver resolver(slurm_env({{"SLURM_CPUS_PER_TASK", "2"}}), {.cores = {6, 7}});
  EXPECT_EQ(resolver.num_accelerators(), 2);
  EXPECT_EQ(resolver.local_devices()[0].cores, std::vector<int>{6});
}

TEST(SlurmClusterResolver, SpreadsTasksInBlocksWithoutTasksPerNode) {
  std::map<std::string, std::string> env = {
      {"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "5"}, {"SLURM_JOB_NODELIST", "n[1-2]"}};
  SlurmClusterResolver resolver(Environment::fixed(env), kTwoCores);
  EXPECT_EQ(resolver.cluster_spec().jobs.at("worker"),
            (Strings{"n1:8888", "n1:8889", "n1:8890", "n2:8888", "n2:8889"}));
  EXPECT_EQ(resolver.master(), "n1:8890");
}

TEST(SlurmClusterResolver, PrefersTheStepsOwnVariables) {
  SlurmClusterResolver resolver(slurm_env({{"SLURM_PROCID", "0"},
                                           {"SLURM_STEP_NUM_TASKS", "2"},
                                           {"SLURM_STEP_NODELIST", "node02"},
                                           {"SLURM_STEP_TASKS_PER_NODE", "2"},
                                           {"SLURM_LOCALID", "0"}}),
                                kTwoCores, 9000);
  EXPECT_EQ(resolver.cluster_spec().jobs.at("worker"), (Strings{"node02:9000", "node02:9001"}));
}

TEST(SlurmClusterResolver, ErrorsNameTheVariable) {
  expect_error_mentioning<NotFound>(
      [] {
        SlurmClusterResolver(Environment::fixed({{"SLURM_NTASKS", "2"}}), kTwoCores);
      },
      {"SLURM_PROCID", "srun"});
  expect_error_mentioning<InvalidArgument>(
      [] {
        SlurmClusterResolver(slurm_env({{"SLURM_NTASKS", "four"}}), kTwoCores);
      },
      {"SLURM_NTASKS", "four"});
  expect_error_mentioning<InvalidArgument>(
      [] {
        SlurmClusterResolver(slurm_env({{"SLURM_PROCID", "4"}}), kTwoCores);
      },
      {"SLURM_PROCID=4"});
  expect_error_mentioning<InvalidArgument>(
      [] {
        SlurmClusterResolver(slurm_env({{"SLURM_JOB_NODELIST", "node[01-"}}), kTwoCores);
      },
      {"SLURM_JOB_NODELIST", "node[01-"});
  expect_error_mentioning<InvalidArgument>(
      [] {
        SlurmClusterResolver(slurm_env({{"SLURM_TASKS_PER_NODE", "3(x2)"}}), kTwoCores);
      },
      {"SLURM_TASKS_PER_NODE", "SLURM_NTASKS=4"});
  expect_error_mentioning<InvalidArgument>(
      [] {
        SlurmClusterResolver(slurm_env({{"SLURM_LOCALID", "2"}}), kTwoCores);
      },
      {"SLURM_LOCALID=2"});
  expect_error_mentioning<InvalidArgument>(
      [] {
        SlurmClusterResolver(slurm_env({{"SLURM_CPUS_PER_TASK", "0"}}), kTwoCores);
      },
      {"SLURM_CPUS_PER_TASK", "\"0\""});
  expect_error_mentioning<InvalidArgument>(
      [] {
        SlurmClusterResolver(slurm_env({{"SLURM_NTASKS", "2000000000"}}), kTwoCores);
      },
      {"SLURM_NTASKS=2000000000"});
}

// ---------------------------------------------------------------- MPI

TEST(MpiClusterResolver, ReadsOpenMpiVariablesAndSharesTheHostsCores) {
  MpiClusterResolver resolver(Environment::fixed({{"OMPI_COMM_WORLD_RANK", "1"},
                                                  {"OMPI_COMM_WORLD_SIZE", "4"},
                                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}),
                              {.cores = {0, 1, 2, 3, 4}});
  EXPECT_EQ(resolver.task_id(), 1);
  EXPECT_EQ(resolver.num_workers(), 4);
  EXPECT_EQ(resolver.worker_index(), 1);
  EXPECT_EQ(resolver.local_rank(), 1);
  EXPECT_EQ(resolver.local_size(), 2);
  EXPECT_EQ(resolver.rpc_layer(), "mpi");
  EXPECT_EQ(resolver.master(), "");
  EXPECT_EQ(resolver.cluster_spec().num_tasks("worker"), 4);
  // 5 cores over 2 local ranks: rank 0 takes [0, 2), rank 1 takes [2, 5).
  const auto devices = resolver.local_devices();
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices[0].cores, std::vector<int>{2});
  EXPECT_EQ(devices[2].cores, std::vector<int>{4});
  EXPECT_EQ(devices[0].task, 1);
}

TEST(MpiClusterResolver, ReadsHydraVariables) {
  MpiClusterResolver resolver(Environment::fixed({{"PMI_RANK", "2"},
                                                  {"PMI_SIZE", "3"},
                                                  {"MPI_LOCALRANKID", "0"},
                                                  {"MPI_LOCALNRANKS", "1"}}),
                              kTwoCores);
  EXPECT_EQ(resolver.task_id(), 2);
  EXPECT_EQ(resolver.num_workers(), 3);
  EXPECT_EQ(resolver.num_accelerators(), 2);
}

TEST(MpiClusterResolver, KeepsTheCoreTheLauncherBoundItTo) {
  // Open MPI binds each of 2 ranks to one core by default: nothing left to divide.
  MpiClusterResolver resolver(Environment::fixed({{"OMPI_COMM_WORLD_RANK", "0"},
                                                  {"OMPI_COMM_WORLD_SIZE", "2"},
                                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}),
                              {.cores = {5}});
  ASSERT_EQ(resolver.num_accelerators(), 1);
  EXPECT_EQ(resolver.local_devices()[0].cores, std::vector<int>{5});
}

TEST(MpiClusterResolver, LockstepDevicesAppliesToEachRank) {
  MpiClusterResolver resolver(Environment::fixed({{"OMPI_COMM_WORLD_RANK", "0"},
                                                  {"OMPI_COMM_WORLD_SIZE", "2"},
                                                  {"LOCKSTEP_DEVICES", "cpu:2"}}),
                              kTwoCores);
  EXPECT_EQ(resolver.num_accelerators(), 2);
}

TEST(MpiClusterResolver, ErrorsNameTheVariables) {
  expect_error_mentioning<NotFound>([] { MpiClusterResolver(kNoVariables, kTwoCores); },
                                    {"OMPI_COMM_WORLD_RANK", "mpirun"});
  expect_error_mentioning<InvalidArgument>(
      [] {
        MpiClusterResolver(Environment::fixed({{"OMPI_COMM_WORLD_RANK", "0"}}), kTwoCores);
      },
      {"OMPI_COMM_WORLD_SIZE"});
  expect_error_mentioning<InvalidArgument>(
      [] {
        MpiClusterResolver(
            Environment::fixed({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}}),
            kTwoCores);
      },
      {"OMPI_COMM_WORLD_RANK=4", "OMPI_COMM_WORLD_SIZE=4"});
  expect_error_mentioning<InvalidArgument>(
      [] {
        MpiClusterResolver(Environment::fixed({{"PMI_RANK", "x"}, {"PMI_SIZE", "2"}}), kTwoCores);
      },
      {"PMI_RANK", "\"x\""});
  expect_error_mentioning<InvalidArgument>(
      [] {
        MpiClusterResolver(Environment::fixed({{"PMI_RANK", "0"}, {"PMI_SIZE", "2000000000"}}),
                           kTwoCores);
      },
      {"PMI_SIZE=2000000000"});
  expect_error_mentioning<InvalidArgument>(
      [] {
        MpiClusterResolver(Environment::fixed({{"OMPI_COMM_WORLD_RANK", "0"},
                                               {"OMPI_COMM_WORLD_SIZE", "2"},
                                               {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}),
                           kTwoCores);
      },
      {"OMPI_COMM_WORLD_LOCAL_RANK=3"});
}

// ---------------------------------------------------------------- resolve_cluster

template <typename Expected>
bool resolves_to(const Environment& env) {
  auto resolver = resolve_cluster(env, kTwoCores);
  return dynamic_cast<Expected*>(resolver.get()) != nullptr;
}

TEST(ResolveCluster, PrefersMpiThenSlurmThenTfConfigThenLocal) {
  const std::string tf_config =
      R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}})";
  EXPECT_TRUE(resolves_to<LocalCpuResolver>(kNoVariables));
  EXPECT_TRUE(resolves_to<TFConfigClusterResolver>(Environment::fixed({{"TF_CONFIG", tf_config}})));
  EXPECT_TRUE(resolves_to<SlurmClusterResolver>(slurm_env({{"TF_CONFIG", tf_config}})));
  EXPECT_TRUE(resolves_to<MpiClusterResolver>(
      slurm_env({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}})));
}

TEST(ResolveCluster, AnSbatchScriptOutsideSrunIsLocal) {
  // sbatch exports the allocation's task count to the one process running the script.
  std::map<std::string, std::string> env = {
      {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_NODELIST", "n[1-2]"}};
  EXPECT_TRUE(resolves_to<LocalCpuResolver>(Environment::fixed(env)));
}

}  // namespace
}  // namespace lockstep
