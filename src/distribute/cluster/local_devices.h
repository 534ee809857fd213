#pragma once
// Shared by every resolver: turning a worker's cores into its replica devices.
#include <string>
#include <vector>

#include "lockstep/distribute/cluster_resolver.h"

namespace lockstep::cluster_internal {

// options.cores if given (validated), else available_cores(options.cgroup_root).
std::vector<int> worker_cores(const LocalDeviceOptions& options);

// The replicas of one worker on `cores`: options.num_replicas, else LOCKSTEP_DEVICES from `env`,
// else one per options.cores_per_replica cores. Replica i takes cores
// [i*k, i*k + k) modulo the core count, so oversubscribed replicas wrap round-robin (warned).
std::vector<DeviceSpec> make_local_devices(const std::vector<int>& cores,
                                           const LocalDeviceOptions& options,
                                           const Environment& env, const std::string& job,
                                           int task);

// Parses a non-negative decimal integer environment variable; InvalidArgument names the variable,
// the value and what was expected.
int parse_env_int(const std::string& variable, const std::string& value, int min_value);

std::string join_ints(const std::vector<int>& values);

// Upper bound on tasks or hosts a launcher variable may describe: far above any real job, low
// enough that a corrupt value cannot make a resolver allocate billions of addresses.
inline constexpr int kMaxTasks = 1 << 20;

}  // namespace lockstep::cluster_internal

namespace lockstep::cluster_internal {

// How local rank `local_rank` of `local_size` ranks on a host divides the cores this process sees
// (`cores`) with the other ranks. With per_rank > 0 (SLURM_CPUS_PER_TASK) and enough cores for
// every rank, rank r takes [r*per_rank, (r+1)*per_rank), and otherwise keeps what it sees (SLURM
// bound it already). Without per_rank, rank r takes the r-th contiguous share when there are at
// least as many cores as ranks, and else one core, cores[r mod count]: ranks that outnumber the
// cores get one replica each rather than each a replica per core (which would oversubscribe the
// host by the number of ranks). A launcher that bound each rank to one core is the case count 1.
CoreDivision divide_cores(const std::vector<int>& cores, int local_rank, int local_size,
                          int per_rank);

}  // namespace lockstep::cluster_internal
