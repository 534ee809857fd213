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

}  // namespace lockstep::cluster_internal
