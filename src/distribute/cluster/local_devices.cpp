#include "local_devices.h"

#include <algorithm>
#include <charconv>
#include <iostream>
#include <set>

#include "lockstep/core/check.h"
#include "lockstep/core/error.h"

namespace lockstep::cluster_internal {

std::string join_ints(const std::vector<int>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(values[i]);
  }
  return out;
}

int parse_env_int(const std::string& variable, const std::string& value, int min_value) {
  int parsed = 0;
  const char* end = value.data() + value.size();
  auto [ptr, error] = std::from_chars(value.data(), end, parsed);
  LOCKSTEP_CHECK(!value.empty() && error == std::errc() && ptr == end && parsed >= min_value,
                 variable, ": expected an integer >= ", min_value, ". Received: ", variable, "=\"",
                 value, "\".");
  return parsed;
}

std::vector<int> worker_cores(const LocalDeviceOptions& options) {
  if (options.cores.empty()) return available_cores(options.cgroup_root);
  std::set<int> seen;
  for (int core : options.cores) {
    const bool distinct = seen.insert(core).second;
    LOCKSTEP_CHECK(core >= 0 && distinct,
                   "LocalDeviceOptions::cores: expected distinct cpu ids >= 0. Received: [",
                   join_ints(options.cores), "].");
  }
  return options.cores;
}

namespace {

// LOCKSTEP_DEVICES: "cpu:N" (N replicas) or "cpu" (detect); 0 = not set / detect.
int replicas_from_env(const Environment& env) {
  auto value = env.get("LOCKSTEP_DEVICES");
  if (!value || value->empty()) return 0;
  const auto colon = value->find(':');
  const std::string kind_text = value->substr(0, colon);
  DeviceKind kind;
  try {
    kind = parse_device_kind(kind_text);
  } catch (const InvalidArgument&) {
    throw InvalidArgument(
        "LOCKSTEP_DEVICES: expected \"cpu:N\" (N virtual replicas) or \"cpu\". "
        "Received: LOCKSTEP_DEVICES=\"" +
        *value + "\".");
  }
  LOCKSTEP_CHECK_AS(NotFound, kind == DeviceKind::cpu, "LOCKSTEP_DEVICES=\"", *value,
                    "\" asks for ", kind_text,
                    " devices, but Lockstep has only a cpu backend today. Set "
                    "LOCKSTEP_DEVICES=cpu:N or unset it.");
  if (colon == std::string::npos) return 0;
  const std::string count = value->substr(colon + 1);
  int parsed = 0;
  auto [ptr, error] = std::from_chars(count.data(), count.data() + count.size(), parsed);
  LOCKSTEP_CHECK(
      !count.empty() && error == std::errc() && ptr == count.data() + count.size() && parsed >= 1,
      "LOCKSTEP_DEVICES: expected \"cpu:N\" with N >= 1 replicas. Received: LOCKSTEP_DEVICES=\"",
      *value, "\".");
  return parsed;
}

}  // namespace

std::vector<DeviceSpec> make_local_devices(const std::vector<int>& cores,
                                           const LocalDeviceOptions& options,
                                           const Environment& env, const std::string& job,
                                           int task) {
  LOCKSTEP_CHECK(options.num_replicas >= 0,
                 "LocalDeviceOptions::num_replicas: expected >= 0 (0 = one per core). Received: ",
                 options.num_replicas, ".");
  LOCKSTEP_CHECK(options.cores_per_replica >= 1,
                 "LocalDeviceOptions::cores_per_replica: expected >= 1. Received: ",
                 options.cores_per_replica, ".");
  LOCKSTEP_CHECK_AS(Internal, !cores.empty(),
                    "make_local_devices: a worker must have at least one core");
  const int num_cores = static_cast<int>(cores.size());
  const int per_replica = options.cores_per_replica;
  int replicas = options.num_replicas;
  const char* source = "LocalDeviceOptions::num_replicas";
  if (replicas == 0) {
    replicas = replicas_from_env(env);
    source = "LOCKSTEP_DEVICES";
  }
  if (replicas == 0) {
    replicas = std::max(1, num_cores / per_replica);
    source = nullptr;
  }
  if (static_cast<long long>(replicas) * per_replica > num_cores) {
    std::cerr << "lockstep: warning: " << replicas << " replica(s) x " << per_replica
              << " core(s) oversubscribed on " << num_cores << " available core(s) ["
              << join_ints(cores) << "]"
              << (source ? std::string(" (from ") + source + ")" : std::string())
              << "; replicas share cores round-robin, which is right for testing but slow for "
                 "training.\n";
  }
  std::vector<DeviceSpec> devices;
  devices.reserve(replicas);
  for (int i = 0; i < replicas; ++i) {
    DeviceSpec device{.kind = DeviceKind::cpu, .index = i, .cores = {}, .job = job, .task = task};
    for (int j = 0; j < std::min(per_replica, num_cores); ++j) {
      device.cores.push_back(cores[(static_cast<long long>(i) * per_replica + j) % num_cores]);
    }
    std::sort(device.cores.begin(), device.cores.end());
    devices.push_back(std::move(device));
  }
  return devices;
}

}  // namespace lockstep::cluster_internal

namespace lockstep::cluster_internal {

namespace {

// Local rank r's cores under the rule of divide_cores.
std::vector<int> share_of(const std::vector<int>& cores, int r, int local_size, int per_rank) {
  const long long count = static_cast<long long>(cores.size());
  if (local_size <= 1) return cores;
  if (per_rank > 0) {
    if (count < static_cast<long long>(local_size) * per_rank) return cores;
    return {cores.begin() + static_cast<long long>(r) * per_rank,
            cores.begin() + static_cast<long long>(r + 1) * per_rank};
  }
  if (count < local_size) return {cores[static_cast<size_t>(r % count)]};
  return {cores.begin() + r * count / local_size, cores.begin() + (r + 1) * count / local_size};
}

}  // namespace

CoreDivision divide_cores(const std::vector<int>& cores, int local_rank, int local_size,
                          int per_rank) {
  return CoreDivision{.local_workers = std::max(local_size, 1),
                      .local_worker = local_rank,
                      .visible_cores = cores,
                      .cores = share_of(cores, local_rank, local_size, per_rank),
                      .cores_per_worker = per_rank};
}

}  // namespace lockstep::cluster_internal
