#include "lockstep/core/cpu_cores.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "lockstep/core/check.h"
#include "lockstep/core/error.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

// The affinity mask of thread `tid` (0: the caller). Large hosts have more cpus than a static
// cpu_set_t holds (1024), so grow until the kernel accepts the size.
std::vector<int> thread_affinity(pid_t tid = 0) {
  for (int ncpus = 1024; ncpus <= (1 << 20); ncpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(ncpus);
    const size_t bytes = CPU_ALLOC_SIZE(ncpus);
    CPU_ZERO_S(bytes, set);
    if (sched_getaffinity(tid, bytes, set) == 0) {
      std::vector<int> cores;
      for (int cpu = 0; cpu < ncpus; ++cpu) {
        if (CPU_ISSET_S(cpu, bytes, set)) cores.push_back(cpu);
      }
      CPU_FREE(set);
      return cores;
    }
    const int error = errno;
    CPU_FREE(set);
    LOCKSTEP_CHECK_AS(Internal, error == EINVAL,
                      "sched_getaffinity failed: ", std::strerror(error));
  }
  throw Internal("sched_getaffinity: no cpu set size up to 2^20 cpus was accepted");
}

std::optional<std::string> read_first_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

std::optional<long long> parse_integer(const std::string& text) {
  std::istringstream in(text);
  long long value = 0;
  if (!(in >> value)) return std::nullopt;
  std::string rest;
  if (in >> rest) return std::nullopt;
  return value;
}

std::optional<int> cores_from_quota(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  return static_cast<int>(std::max<long long>(1, quota / period));
}

// cgroup v2: "max 100000" or "<quota> <period>".
std::optional<int> read_cpu_max(const fs::path& dir) {
  auto line = read_first_line(dir / "cpu.max");
  if (!line) return std::nullopt;
  std::istringstream in(*line);
  std::string quota, period;
  if (!(in >> quota >> period) || quota == "max") return std::nullopt;
  auto q = parse_integer(quota), p = parse_integer(period);
  if (!q || !p) return std::nullopt;
  return cores_from_quota(*q, *p);
}

// cgroup v1: cpu.cfs_quota_us (-1 = unlimited) and cpu.cfs_period_us.
std::optional<int> read_cfs_quota(const fs::path& dir) {
  auto quota = read_first_line(dir / "cpu.cfs_quota_us");
  auto period = read_first_line(dir / "cpu.cfs_period_us");
  if (!quota || !period) return std::nullopt;
  auto q = parse_integer(*quota), p = parse_integer(*period);
  if (!q || !p) return std::nullopt;
  return cores_from_quota(*q, *p);
}

// This process's cgroup paths from /proc/self/cgroup: the v2 path ("0::/a/b") and the v1 path of
// the controller hierarchy that includes "cpu" ("4:cpu,cpuacct:/a/b").
struct SelfCgroup {
  std::string v2 = "/";
  std::string v1_cpu = "/";
};

SelfCgroup self_cgroup() {
  SelfCgroup self;
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (controllers.empty()) {
      self.v2 = path;
      continue;
    }
    std::istringstream names(controllers);
    std::string name;
    while (std::getline(names, name, ',')) {
      if (name == "cpu") self.v1_cpu = path;
    }
  }
  return self;
}

void tighten(std::optional<int>& limit, std::optional<int> candidate) {
  if (candidate && (!limit || *candidate < *limit)) limit = candidate;
}

// Reads `read(dir)` in `base / relative` and every ancestor up to `base`: a quota on a parent
// cgroup limits its children too.
template <typename Read>
void walk_up(const fs::path& base, const std::string& relative, Read read,
             std::optional<int>& limit) {
  if (!fs::is_directory(base)) return;
  fs::path rel = fs::path(relative).relative_path().lexically_normal();
  while (true) {
    tighten(limit, read(base / rel));
    if (rel.empty() || rel == ".") break;
    rel = rel.parent_path();
  }
}

}  // namespace

std::optional<int> cgroup_cpu_limit(const fs::path& cgroup_root) {
  const fs::path root = cgroup_root.lexically_normal();
  const SelfCgroup self = self_cgroup();
  std::optional<int> limit;
  walk_up(root, self.v2, read_cpu_max, limit);
  walk_up(root / "unified", self.v2, read_cpu_max, limit);  // hybrid v1/v2 layout
  for (const char* hierarchy : {"cpu", "cpu,cpuacct", "cpuacct,cpu"}) {
    walk_up(root / hierarchy, self.v1_cpu, read_cfs_quota, limit);
  }
  walk_up(root, self.v1_cpu, read_cfs_quota, limit);  // a single mounted v1 cpu hierarchy
  return limit;
}

std::vector<int> available_cores(const fs::path& cgroup_root) {
  std::vector<int> cores = thread_affinity();
  LOCKSTEP_CHECK_AS(Internal, !cores.empty(), "sched_getaffinity returned an empty cpu set");
  // A quota limits CPU time, not which cpus: keep the lowest ids so replicas stay on distinct
  // cores and their number matches the time the quota grants.
  if (auto limit = cgroup_cpu_limit(cgroup_root);
      limit && *limit < static_cast<int>(cores.size())) {
    cores.resize(*limit);
  }
  return cores;
}

int available_core_count(const fs::path& cgroup_root) {
  return static_cast<int>(available_cores(cgroup_root).size());
}

bool pin_current_thread(const std::vector<int>& cores) {
  if (cores.empty()) return true;
  const int max_core = *std::max_element(cores.begin(), cores.end());
  const int min_core = *std::min_element(cores.begin(), cores.end());
  if (min_core < 0) {
    std::cerr << "lockstep: warning: pin_current_thread: cpu id " << min_core
              << " is negative; the thread stays unpinned.\n";
    return false;
  }
  cpu_set_t* set = CPU_ALLOC(max_core + 1);
  const size_t bytes = CPU_ALLOC_SIZE(max_core + 1);
  CPU_ZERO_S(bytes, set);
  for (int core : cores) CPU_SET_S(core, bytes, set);
  const int error = pthread_setaffinity_np(pthread_self(), bytes, set);
  CPU_FREE(set);
  if (error != 0) {
    std::ostringstream ids;
    for (size_t i = 0; i < cores.size(); ++i) ids << (i ? "," : "") << cores[i];
    std::cerr << "lockstep: warning: could not pin thread to cores [" << ids.str()
              << "]: " << std::strerror(error)
              << ". The thread stays unpinned (slower, not wrong); check the cores with "
                 "`lockstep devices`.\n";
    return false;
  }
  return true;
}

bool use_process_cores() {
  return pin_current_thread(thread_affinity(getpid()));
}

}  // namespace lockstep
