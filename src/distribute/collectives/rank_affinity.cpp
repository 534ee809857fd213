#include "rank_affinity.h"

#include <dirent.h>

#include <cstdlib>
#include <cstring>

#include "lockstep/core/error.h"

namespace lockstep::distribute::detail {

RankAffinity rank_affinity_from_environment() {
  const char* env = std::getenv("LOCKSTEP_RANK_AFFINITY");
  if (env == nullptr || *env == '\0') return RankAffinity::job;
  const std::string v(env);
  if (v == "job") return RankAffinity::job;
  if (v == "launcher") return RankAffinity::launcher;
  throw InvalidArgument(
      "LOCKSTEP_RANK_AFFINITY must be \"job\" (the default: each rank's threads may run on every "
      "CPU the launcher bound the job's ranks on this host to) or \"launcher\" (each rank keeps "
      "the binding the launcher gave it), got \"" +
      v + "\".");
}

cpu_set_t job_cpus_on_host(const std::vector<RankCpus>& ranks, const std::string& host) {
  cpu_set_t all;
  CPU_ZERO(&all);
  for (const RankCpus& r : ranks)
    if (r.host == host) CPU_OR(&all, &all, &r.cpus);
  return all;
}

int widen_threads(const cpu_set_t& bound, const cpu_set_t& job) {
  // Threads started from here on inherit the widened mask of the thread that starts them; the
  // ones already running (MPI's own, an input pipeline's, a pool's) are found in /proc.
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return 0;
  int moved = 0;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long tid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || tid <= 0) continue;
    cpu_set_t now;
    CPU_ZERO(&now);
    if (sched_getaffinity(static_cast<pid_t>(tid), sizeof now, &now) != 0) continue;
    if (!CPU_EQUAL(&now, &bound)) continue;
    if (sched_setaffinity(static_cast<pid_t>(tid), sizeof job, &job) == 0) ++moved;
  }
  closedir(dir);
  return moved;
}

}  // namespace lockstep::distribute::detail
