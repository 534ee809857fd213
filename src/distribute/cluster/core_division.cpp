#include <algorithm>
#include <set>

#include "local_devices.h"
#include "lockstep/distribute/cluster_resolver.h"

namespace lockstep {
namespace {

using cluster_internal::join_ints;

std::string cores_text(const std::vector<int>& cores) {
  return (cores.size() == 1 ? "core " : "cores ") + join_ints(cores);
}

// "(local worker 0: core 0, 1: core 1, 2: core 0)", the first few workers only.
std::string listing(const CoreDivision& d) {
  constexpr int kShown = 8;
  std::string out = " (local worker ";
  const int shown = std::min(d.local_workers, kShown);
  for (int r = 0; r < shown; ++r) {
    const CoreDivision other =
        cluster_internal::divide_cores(d.visible_cores, r, d.local_workers, d.cores_per_worker);
    out += (r ? ", " : "") + std::to_string(r) + ": " + cores_text(other.cores);
  }
  if (shown < d.local_workers) out += ", ...";
  return out + ")";
}

}  // namespace

std::string CoreDivision::to_string() const {
  const std::string visible = std::to_string(visible_cores.size()) +
                              (visible_cores.size() == 1 ? " core [" : " cores [") +
                              join_ints(visible_cores) + "]";
  if (local_workers <= 1) return "1 worker on this host, on " + visible;
  const long long count = static_cast<long long>(visible_cores.size());
  std::string out = std::to_string(local_workers) + " local workers on " + visible + ": ";
  if (cores_per_worker > 0 && count < static_cast<long long>(local_workers) * cores_per_worker) {
    out += "the launcher bound each worker to its cores (SLURM_CPUS_PER_TASK=" +
           std::to_string(cores_per_worker) + ")";
  } else if (cores_per_worker > 0) {
    out += std::to_string(cores_per_worker) + " each (SLURM_CPUS_PER_TASK)" + listing(*this);
  } else if (count >= local_workers) {
    out += "a contiguous share each" + listing(*this);
  } else if (count > 1) {
    out += "more workers than cores, so one core (one replica) each, round-robin" + listing(*this);
  } else {
    out += "one core each (the launcher bound every worker to one)";
  }
  return out + "; this is local worker " + std::to_string(local_worker) + " on " +
         cores_text(cores);
}

CoreDivision ClusterResolver::core_division() const {
  std::set<int> used;
  for (const DeviceSpec& device : local_devices())
    used.insert(device.cores.begin(), device.cores.end());
  std::vector<int> cores(used.begin(), used.end());
  return CoreDivision{.visible_cores = cores, .cores = cores};
}

}  // namespace lockstep
