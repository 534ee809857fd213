#pragma once
// CPU topology, the one answer to "how many cores": the cores this process may run on (its
// affinity mask cut by a CPU quota), and pinning a thread to some of them. Cluster resolvers size
// the replica set with available_cores(); the strategy's thread pools, the shared-memory
// collectives and parallel map size themselves with available_core_count(); pool threads pin
// themselves with pin_current_thread(), and helper threads unpin with use_process_cores().
#include <filesystem>
#include <optional>
#include <vector>

namespace lockstep {

inline constexpr const char* kDefaultCgroupRoot = "/sys/fs/cgroup";

// OS cpu ids the calling thread may run on: its affinity mask (sched_getaffinity, which already
// reflects taskset, numactl, cpuset cgroups and launcher binding), cut down to the first
// `cgroup_cpu_limit(cgroup_root)` ids when a CPU quota allows fewer cores than the mask. Sorted
// ascending; never empty. Reads the *calling thread's* mask: call it before pinning any thread.
std::vector<int> available_cores(const std::filesystem::path& cgroup_root = kDefaultCgroupRoot);
// available_cores().size(): how many cores the calling thread may use (at least 1). Reads the
// affinity mask and the cgroup files at every call; callers on a hot path keep the value.
int available_core_count(const std::filesystem::path& cgroup_root = kDefaultCgroupRoot);

// Whole cores a CPU bandwidth quota allows: floor(quota / period), at least 1; nullopt when there
// is no quota. Reads cgroup v2 `cpu.max` ("max 100000" = no quota, "150000 100000" = 1 core) and
// cgroup v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` (quota -1 = none), in this process's cgroup
// (from /proc/self/cgroup) and every ancestor up to `cgroup_root`, and returns the tightest.
// Missing or unreadable files mean no quota: a container without cgroup files is not an error.
std::optional<int> cgroup_cpu_limit(const std::filesystem::path& cgroup_root = kDefaultCgroupRoot);

// Restricts the calling thread to `cores` (pthread_setaffinity_np). An empty list is a no-op.
// Failure (an id outside the mask the OS allows) prints a warning to stderr and returns false:
// an unpinned replica is slower, not wrong.
bool pin_current_thread(const std::vector<int>& cores);

// Lets the calling thread run on every cpu the process may use (the main thread's mask, whose id
// is the pid): for a helper thread started from a pinned thread, which would otherwise inherit
// that one core and compete with the work it should overlap. False as pin_current_thread.
bool use_process_cores();

}  // namespace lockstep
