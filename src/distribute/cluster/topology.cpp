#include "lockstep/distribute/topology.h"

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "local_devices.h"
#include "lockstep/core/check.h"
#include "lockstep/core/error.h"
#include "lockstep/distribute/mpi_context.h"

namespace lockstep {
namespace {

// The one process-wide "current cluster": such state is kept in one well-defined place, here.
std::mutex cluster_mutex;
std::optional<ConnectedCluster> current_cluster;

ConnectedCluster validated_cluster(const ClusterResolver& resolver) {
  ConnectedCluster cluster{.cluster_spec = resolver.cluster_spec(),
                           .task_type = resolver.task_type(),
                           .task_id = resolver.task_id(),
                           .worker_index = resolver.worker_index(),
                           .num_workers = resolver.num_workers(),
                           .rpc_layer = resolver.rpc_layer(),
                           .master = resolver.master()};
  for (const auto& [job, tasks] : cluster.cluster_spec.jobs) {
    LOCKSTEP_CHECK(!tasks.empty(), "connect_to_cluster: job \"", job,
                   "\" has no tasks. Expected at least one address per job.");
    for (size_t i = 0; i < tasks.size(); ++i) {
      LOCKSTEP_CHECK(!tasks[i].empty(), "connect_to_cluster: job \"", job, "\" task ", i,
                     " has an empty address.");
    }
  }
  const int tasks_of_type = cluster.cluster_spec.num_tasks(cluster.task_type);
  // An empty cluster spec (one local worker) has no task of any type.
  const bool task_in_cluster =
      cluster.task_id >= 0 &&
      (tasks_of_type > 0 ? cluster.task_id < tasks_of_type : cluster.cluster_spec.jobs.empty());
  LOCKSTEP_CHECK(task_in_cluster, "connect_to_cluster: this task is ", cluster.task_type, ":",
                 cluster.task_id, ", but the cluster has ", tasks_of_type, " \"", cluster.task_type,
                 "\" task(s). Check the resolver's environment (TF_CONFIG, SLURM, MPI).");
  LOCKSTEP_CHECK(cluster.worker_index >= 0 && cluster.worker_index < cluster.num_workers,
                 "connect_to_cluster: worker index ", cluster.worker_index, " is outside the ",
                 cluster.num_workers, " worker(s) of the cluster.");
  LOCKSTEP_CHECK(resolver.num_accelerators() >= 1,
                 "connect_to_cluster: this worker has no devices. Expected at least one replica; "
                 "check LOCKSTEP_DEVICES and the cores available to the process.");
  return cluster;
}

// "0-3, 6": worker indices as ranges.
std::string ranges(const std::vector<int>& sorted) {
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(sorted[i]);
    if (j > i) out += "-" + std::to_string(sorted[j]);
    i = j + 1;
  }
  return out;
}

// "  2 hosts, 1 worker per host, 2 replicas per worker" and one line per host, in the order of
// each host's first worker.
void write_hosts(std::ostringstream& out, const Topology& t) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> workers;
  for (size_t w = 0; w < t.worker_hosts.size(); ++w) {
    auto& list = workers[t.worker_hosts[w]];
    if (list.empty()) order.push_back(t.worker_hosts[w]);
    list.push_back(static_cast<int>(w));
  }
  size_t fewest = t.worker_hosts.size(), most = 0;
  for (const auto& [host, list] : workers) {
    fewest = std::min(fewest, list.size());
    most = std::max(most, list.size());
  }
  const std::string per_host =
      fewest == most ? std::to_string(most) : std::to_string(fewest) + "-" + std::to_string(most);
  out << "  " << order.size() << (order.size() == 1 ? " host, " : " hosts, ") << per_host
      << (most == 1 ? " worker" : " workers") << " per host, " << t.num_local_replicas()
      << (t.num_local_replicas() == 1 ? " replica" : " replicas") << " per worker\n";
  for (const std::string& host : order) {
    const auto& list = workers[host];
    out << "  host " << host << ": " << (list.size() == 1 ? "worker " : "workers ") << ranges(list)
        << "\n";
  }
}

}  // namespace

std::string Topology::to_string() const {
  std::ostringstream out;
  out << num_workers << (num_workers == 1 ? " worker" : " workers") << " (this is worker "
      << task_id << "), " << num_local_replicas()
      << (num_local_replicas() == 1 ? " local replica, " : " local replicas, ")
      << num_replicas_in_sync() << " in sync\n";
  if (num_workers > 1 && static_cast<int>(worker_hosts.size()) == num_workers) {
    write_hosts(out, *this);
  }
  if (core_division.local_workers > 1) out << core_division.to_string() << "\n";
  for (const DeviceSpec& device : local_devices) {
    out << "  " << device.name() << "  cores " << cluster_internal::join_ints(device.cores) << "\n";
  }
  return out.str();
}

nlohmann::json Topology::to_json() const {
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceSpec& device : local_devices) {
    devices.push_back({{"name", device.name()},
                       {"kind", std::string(device_kind_name(device.kind))},
                       {"index", device.index},
                       {"cores", device.cores}});
  }
  nlohmann::json json = {{"num_workers", num_workers},
                         {"task_id", task_id},
                         {"num_replicas_in_sync", num_replicas_in_sync()},
                         {"local_devices", devices},
                         {"core_division",
                          {{"local_workers", core_division.local_workers},
                           {"local_worker", core_division.local_worker},
                           {"visible_cores", core_division.visible_cores},
                           {"cores", core_division.cores},
                           {"description", core_division.to_string()}}}};
  if (!worker_hosts.empty()) json["worker_hosts"] = worker_hosts;
  return json;
}

void connect_to_cluster(const ClusterResolver& resolver) {
  ConnectedCluster cluster = validated_cluster(resolver);
  std::lock_guard lock(cluster_mutex);
  current_cluster = std::move(cluster);
}

std::optional<ConnectedCluster> connected_cluster() {
  std::lock_guard lock(cluster_mutex);
  return current_cluster;
}

void disconnect_from_cluster() {
  std::lock_guard lock(cluster_mutex);
  current_cluster.reset();
}

Topology initialize_system(const ClusterResolver& resolver) {
  const ConnectedCluster cluster = validated_cluster(resolver);
  Topology topology{.num_workers = cluster.num_workers,
                    .task_id = cluster.worker_index,
                    .local_devices = resolver.local_devices(),
                    .core_division = resolver.core_division()};
  // Only the launcher's processes know where the others run: ask them (MPI's world is the job's
  // workers in rank order, which MultiWorkerMirroredStrategy checks against the resolver).
  if (cluster.num_workers > 1 && resolver.rpc_layer() == "mpi") {
    distribute::MpiContext& mpi = distribute::mpi_initialize();
    if (mpi.active() && mpi.world_size() == cluster.num_workers) {
      topology.worker_hosts = mpi.world_hosts();
    }
  }
  return topology;
}

}  // namespace lockstep
