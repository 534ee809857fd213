// connect_to_cluster and initialize_system over the resolvers.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "lockstep/core/error.h"
#include "lockstep/distribute/cluster_resolver.h"
#include "lockstep/distribute/topology.h"

namespace lockstep {
namespace {

// A resolver whose answers a test sets directly, to reach inconsistent clusters that the real
// resolvers reject before connect_to_cluster sees them.
class FixedResolver : public ClusterResolver {
 public:
  ClusterSpec spec{{{"worker", {"a:1", "b:1"}}}};
  std::string type = "worker";
  int id = 0;
  std::vector<DeviceSpec> devices{{.kind = DeviceKind::cpu, .index = 0, .cores = {0}}};

  ClusterSpec cluster_spec() const override { return spec; }
  std::string task_type() const override { return type; }
  int task_id() const override { return id; }
  int num_accelerators() const override { return static_cast<int>(devices.size()); }
  std::vector<DeviceSpec> local_devices() const override { return devices; }
};

MpiClusterResolver mpi_rank_1_of_4() {
  return MpiClusterResolver(Environment::fixed({{"OMPI_COMM_WORLD_RANK", "1"},
                                                {"OMPI_COMM_WORLD_SIZE", "4"},
                                                {"LOCKSTEP_DEVICES", "cpu:3"}}),
                            {.cores = {0, 1, 2}});
}

TEST(InitializeSystem, CountsWorkersAndReplicas) {
  const Topology topology = initialize_system(mpi_rank_1_of_4());
  EXPECT_EQ(topology.num_workers, 4);
  EXPECT_EQ(topology.task_id, 1);
  EXPECT_EQ(topology.num_local_replicas(), 3);
  EXPECT_EQ(topology.num_replicas_in_sync(), 12);
  const std::string text = topology.to_string();
  EXPECT_NE(text.find("4 workers"), std::string::npos) << text;
  EXPECT_NE(text.find("12 in sync"), std::string::npos) << text;
  EXPECT_NE(text.find("/job:worker/task:1/device:cpu:2  cores 2"), std::string::npos) << text;
  const nlohmann::json json = topology.to_json();
  EXPECT_EQ(json["num_replicas_in_sync"], 12);
  EXPECT_EQ(json["local_devices"].size(), 3u);
  EXPECT_EQ(json["local_devices"][2]["cores"], nlohmann::json::array({2}));
  EXPECT_EQ(json["local_devices"][0]["kind"], "cpu");
}

TEST(Topology, ListsHostsWithTheirWorkers) {
  Topology t{.num_workers = 5,
             .task_id = 3,
             .local_devices = {{.kind = DeviceKind::cpu, .index = 0, .cores = {0}},
                               {.kind = DeviceKind::cpu, .index = 1, .cores = {1}}},
             .worker_hosts = {"node-a", "node-a", "node-b", "node-a", "node-c"}};
  const std::string text = t.to_string();
  EXPECT_NE(text.find("5 workers (this is worker 3), 2 local replicas, 10 in sync\n"
                      "  3 hosts, 1-3 workers per host, 2 replicas per worker\n"
                      "  host node-a: workers 0-1, 3\n"
                      "  host node-b: worker 2\n"
                      "  host node-c: worker 4\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(t.to_json()["worker_hosts"][2], "node-b");
  // Without host names (no launcher told us) no host lines are printed.
  t.worker_hosts.clear();
  EXPECT_EQ(t.to_string().find("host"), std::string::npos) << t.to_string();
  EXPECT_FALSE(t.to_json().contains("worker_hosts"));
}

TEST(InitializeSystem, SingleHostIsOneWorker) {
  const Topology topology =
      initialize_system(LocalCpuResolver({.cores = {0, 1}}, Environment::fixed({})));
  EXPECT_EQ(topology.num_workers, 1);
  EXPECT_EQ(topology.task_id, 0);
  EXPECT_EQ(topology.num_replicas_in_sync(), 2);
}

TEST(InitializeSystem, ChiefAndWorkersNumberWorkersGlobally) {
  auto resolver = TFConfigClusterResolver::from_string(
      R"({"cluster": {"chief": ["c:1"], "worker": ["a:1", "b:1"]},
          "task": {"type": "worker", "index": 0}})",
      {.cores = {0}}, Environment::fixed({}));
  const Topology topology = initialize_system(resolver);
  EXPECT_EQ(topology.num_workers, 3);
  EXPECT_EQ(topology.task_id, 1);
}

TEST(ConnectToCluster, RecordsTheCurrentClusterUntilDisconnected) {
  disconnect_from_cluster();
  EXPECT_FALSE(connected_cluster().has_value());
  connect_to_cluster(mpi_rank_1_of_4());
  auto cluster = connected_cluster();
  ASSERT_TRUE(cluster.has_value());
  EXPECT_EQ(cluster->num_workers, 4);
  EXPECT_EQ(cluster->task_id, 1);
  EXPECT_EQ(cluster->rpc_layer, "mpi");
  connect_to_cluster(LocalCpuResolver({.cores = {0}}, Environment::fixed({})));
  EXPECT_EQ(connected_cluster()->num_workers, 1);  // reconnecting replaces the cluster
  disconnect_from_cluster();
  EXPECT_FALSE(connected_cluster().has_value());
}

TEST(ConnectToCluster, RejectsInconsistentClusters) {
  FixedResolver outside;
  outside.id = 2;
  EXPECT_THROW(connect_to_cluster(outside), InvalidArgument);
  FixedResolver unknown_job;
  unknown_job.type = "evaluator";
  EXPECT_THROW(connect_to_cluster(unknown_job), InvalidArgument);
  FixedResolver empty_address;
  empty_address.spec.jobs["worker"][1] = "";
  EXPECT_THROW(connect_to_cluster(empty_address), InvalidArgument);
  FixedResolver no_devices;
  no_devices.devices.clear();
  EXPECT_THROW(connect_to_cluster(no_devices), InvalidArgument);
  EXPECT_THROW(initialize_system(no_devices), InvalidArgument);
  FixedResolver fine;
  EXPECT_NO_THROW(initialize_system(fine));
}

}  // namespace
}  // namespace lockstep
