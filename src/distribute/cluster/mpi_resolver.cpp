#include "local_devices.h"
#include "lockstep/core/check.h"
#include "lockstep/core/error.h"
#include "lockstep/distribute/cluster_resolver.h"

namespace lockstep {
namespace {

using cluster_internal::parse_env_int;

struct Found {
  std::string name;
  std::string value;
};

std::optional<Found> first_set(const Environment& env, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (auto value = env.get(name); value && !value->empty()) return Found{name, *value};
  }
  return std::nullopt;
}

constexpr std::initializer_list<const char*> kRankVariables = {"OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                                               "PMIX_RANK"};

}  // namespace

bool has_mpi_environment(const Environment& env) {
  return first_set(env, kRankVariables).has_value();
}

MpiClusterResolver::MpiClusterResolver(const Environment& env, LocalDeviceOptions devices) {
  const auto rank = first_set(env, kRankVariables);
  LOCKSTEP_CHECK_AS(NotFound, rank,
                    "No MPI launcher environment: none of OMPI_COMM_WORLD_RANK, PMI_RANK, "
                    "PMIX_RANK is set. Start the program with `mpirun -np <N> ...` (or use "
                    "resolve_cluster() to detect the environment).");
  const auto size = first_set(env, {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"});
  LOCKSTEP_CHECK(size, rank->name,
                 " is set but none of OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE is: the launcher "
                 "environment is incomplete.");
  rank_ = parse_env_int(rank->name, rank->value, 0);
  size_ = parse_env_int(size->name, size->value, 1);
  LOCKSTEP_CHECK(size_ <= cluster_internal::kMaxTasks, size->name, "=", size->value,
                 " exceeds the ", cluster_internal::kMaxTasks,
                 " ranks Lockstep supports; the environment looks corrupt.");
  LOCKSTEP_CHECK(rank_ < size_, rank->name, "=", rank->value, " is outside the world of ",
                 size->name, "=", size->value, " ranks.");
  const auto local_rank = first_set(env, {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"});
  const auto local_size = first_set(env, {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"});
  // Without both, this rank cannot know its neighbours on the host and keeps every core it sees.
  if (local_rank && local_size) {
    local_rank_ = parse_env_int(local_rank->name, local_rank->value, 0);
    local_size_ = parse_env_int(local_size->name, local_size->value, 1);
    LOCKSTEP_CHECK(local_rank_ < local_size_ && local_size_ <= size_, local_rank->name, "=",
                   local_rank->value, " and ", local_size->name, "=", local_size->value,
                   " are inconsistent (expected local rank < local size <= ", size->name, "=",
                   size->value, ").");
  }
  division_ = cluster_internal::divide_cores(cluster_internal::worker_cores(devices), local_rank_,
                                             local_size_, 0);
  devices_ = cluster_internal::make_local_devices(division_.cores, devices, env, "worker", rank_);
}

ClusterSpec MpiClusterResolver::cluster_spec() const {
  std::vector<std::string> ranks;
  ranks.reserve(size_);
  for (int r = 0; r < size_; ++r) ranks.push_back("rank:" + std::to_string(r));
  return {{{"worker", std::move(ranks)}}};
}

int MpiClusterResolver::task_id() const {
  return rank_;
}
int MpiClusterResolver::num_workers() const {
  return size_;
}
int MpiClusterResolver::num_accelerators() const {
  return static_cast<int>(devices_.size());
}
std::vector<DeviceSpec> MpiClusterResolver::local_devices() const {
  return devices_;
}
std::string MpiClusterResolver::rpc_layer() const {
  return "mpi";
}
CoreDivision MpiClusterResolver::core_division() const {
  return division_;
}

}  // namespace lockstep
