#include "local_devices.h"
#include "lockstep/core/check.h"
#include "lockstep/core/error.h"
#include "lockstep/distribute/cluster_resolver.h"

namespace lockstep {

using cluster_internal::make_local_devices;
using cluster_internal::worker_cores;

LocalCpuResolver::LocalCpuResolver(LocalDeviceOptions options, const Environment& env)
    : devices_(make_local_devices(worker_cores(options), options, env, "worker", 0)) {}

ClusterSpec LocalCpuResolver::cluster_spec() const {
  return {{{"worker", {"localhost"}}}};
}
int LocalCpuResolver::num_accelerators() const {
  return static_cast<int>(devices_.size());
}
std::vector<DeviceSpec> LocalCpuResolver::local_devices() const {
  return devices_;
}

namespace {

DeviceKind require_available_kind(const std::string& kind) {
  if (kind == "auto") return DeviceKind::cpu;  // the best kind with a backend: cpu today
  DeviceKind parsed;
  try {
    parsed = parse_device_kind(kind);
  } catch (const InvalidArgument&) {
    throw InvalidArgument(
        "AcceleratorClusterResolver: expected kind \"auto\", \"cpu\", \"cuda\" or "
        "\"tpu\". Received: kind=\"" +
        kind + "\".");
  }
  LOCKSTEP_CHECK_AS(NotFound, parsed == DeviceKind::cpu, "No ", kind,
                    " devices found on this host. Lockstep currently has a cpu backend only, "
                    "which presents this host's cores as replicas. Fall back to get_strategy() "
                    "(one replica), or use AcceleratorClusterResolver({.kind = \"auto\"}) to "
                    "train on the cpu cores.");
  return parsed;
}

}  // namespace

AcceleratorClusterResolver::AcceleratorClusterResolver(AcceleratorOptions options,
                                                       const Environment& env)
    : kind_(require_available_kind(options.kind)),
      devices_(
          make_local_devices(worker_cores(options.devices), options.devices, env, "worker", 0)) {}

AcceleratorClusterResolver::AcceleratorClusterResolver(DeviceKind kind, const Environment& env)
    : AcceleratorClusterResolver(AcceleratorOptions{.kind = std::string(device_kind_name(kind))},
                                 env) {}

ClusterSpec AcceleratorClusterResolver::cluster_spec() const {
  return {{{"worker", {"localhost"}}}};
}
int AcceleratorClusterResolver::num_accelerators() const {
  return static_cast<int>(devices_.size());
}
std::vector<DeviceSpec> AcceleratorClusterResolver::local_devices() const {
  return devices_;
}

}  // namespace lockstep
