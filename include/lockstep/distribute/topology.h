#pragma once
// Connecting to a cluster and describing it: the analogues of
// tf.config.experimental_connect_to_cluster and tf.tpu.experimental.initialize_tpu_system.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "lockstep/distribute/cluster_resolver.h"
#include "lockstep/distribute/device.h"

namespace lockstep {

// What initialize_system found: the workers of the job, which one this process is, and the
// replicas it drives. Assumes every worker drives the same number of replicas (as synchronous
// training requires); MultiWorkerMirroredStrategy checks that across workers.
struct Topology {
  int num_workers = 1;
  int task_id = 0;  // this process's index among num_workers (ClusterResolver::worker_index)
  std::vector<DeviceSpec> local_devices;
  // How this host's cores were divided among the job's workers on it.
  CoreDivision core_division;
  // The host name of every worker, indexed by worker, when the launcher let initialize_system find
  // out (MPI: an all-gather of host names); empty otherwise.
  std::vector<std::string> worker_hosts;

  int num_local_replicas() const { return static_cast<int>(local_devices.size()); }
  // num_workers x num_local_replicas().
  int num_replicas_in_sync() const { return num_workers * num_local_replicas(); }
  // Multi-line, for `lockstep devices`:
  //   1 worker (this is worker 0), 2 local replicas, 2 in sync
  //     /job:worker/task:0/device:cpu:0  cores 0
  //     /job:worker/task:0/device:cpu:1  cores 1
  // With several workers on this host, a line saying how they divided its cores follows the first:
  //   3 workers (this is worker 2), 1 local replica, 3 in sync
  //   3 local workers on 2 cores [0,1]: more workers than cores, so one core (one replica) each,
  //   ...
  // With several workers whose hosts are known, the hosts and their workers come first:
  //   2 workers (this is worker 0), 2 local replicas, 4 in sync
  //     2 hosts, 1 worker per host, 2 replicas per worker
  //     host ls-host-a: worker 0
  //     host ls-host-b: worker 1
  //     /job:worker/task:0/device:cpu:0  cores 0
  //     ...
  std::string to_string() const;
  // {"num_workers", "task_id", "num_replicas_in_sync", "local_devices": [{"name", "kind",
  //  "index", "cores"}], "core_division": {"local_workers", "local_worker", "visible_cores",
  //  "cores", "description"}, "worker_hosts" (when known)}
  nlohmann::json to_json() const;
};

// The cluster this process joined, recorded by connect_to_cluster.
struct ConnectedCluster {
  ClusterSpec cluster_spec;
  std::string task_type;
  int task_id = 0;
  int worker_index = 0;
  int num_workers = 1;
  std::string rpc_layer;
  std::string master;
};

// Validates the resolver's cluster (every job has tasks with non-empty addresses, this task exists
// in it, this worker has at least one device) and records it as the process's current cluster,
// replacing any earlier one. Does not start MPI or open connections: MPI is initialised by the
// MPI communicator. Throws InvalidArgument naming what is inconsistent.
void connect_to_cluster(const ClusterResolver& resolver);
// The cluster recorded by the last connect_to_cluster, or nullopt.
std::optional<ConnectedCluster> connected_cluster();
// Forgets the current cluster (tests, and programs that reconnect elsewhere).
void disconnect_from_cluster();

// Builds the Topology of the resolver's cluster (validated as connect_to_cluster does, but without
// recording it). Under an MPI launcher with several workers it also learns every worker's host
// (Topology::worker_hosts): that initialises MPI and is collective, so every worker must call it.
Topology initialize_system(const ClusterResolver& resolver);

}  // namespace lockstep
