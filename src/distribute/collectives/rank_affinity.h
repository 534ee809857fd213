#pragma once
// Rank affinity: the ranks of one host widen the CPUs their threads may run on from the one the
// launcher bound each to, to all the CPUs the launcher gave the job's ranks on that host (internal
// to MpiCommunicator).
//
// Open MPI binds each of two ranks to a core (to a socket for more). Beside one busy process a
// bound rank cannot leave the core it shares with that process: it gets half of it, and the job,
// in lockstep, steps at the pace of that half. With the union of the ranks' bindings as every
// rank's mask the kernel can spread the job's threads and the busy one over the cores, as with
// `mpirun --bind-to none`, but still only on the cores the launcher chose for the job.
// LOCKSTEP_RANK_AFFINITY=launcher keeps each rank on its launcher's binding.
#include <sched.h>

#include <string>
#include <vector>

namespace lockstep::distribute::detail {

enum class RankAffinity {
  job,       // every thread bound as the launcher bound this rank takes the host's job CPUs
  launcher,  // nothing moves
};

// LOCKSTEP_RANK_AFFINITY: unset or empty, "job" or "launcher". Throws InvalidArgument naming the
// variable for anything else.
RankAffinity rank_affinity_from_environment();

// One rank's launcher binding, as exchanged between the ranks.
struct RankCpus {
  std::string host;
  cpu_set_t cpus;
};

// The union of the CPUs of the ranks on `host`.
cpu_set_t job_cpus_on_host(const std::vector<RankCpus>& ranks, const std::string& host);

// Gives every thread of this process whose affinity is exactly `bound` the affinity `job`
// (threads that were pinned elsewhere keep their masks). Returns how many threads moved; threads
// that exit meanwhile are skipped.
int widen_threads(const cpu_set_t& bound, const cpu_set_t& job);

}  // namespace lockstep::distribute::detail
