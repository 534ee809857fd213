#include <set>
#include <string>

#include "lockstep/core/error.h"
#include "lockstep/distribute/cluster_resolver.h"

namespace lockstep {
namespace {

// The hosts of the training tasks in worker order (chiefs, then workers), without ports, for
// `mpirun --host`.
std::string hosts_of(const ClusterSpec& spec) {
  std::string out;
  for (const char* job : {"chief", "worker"}) {
    auto it = spec.jobs.find(job);
    if (it == spec.jobs.end()) continue;
    for (const std::string& address : it->second) {
      const auto colon = address.rfind(':');
      out += (out.empty() ? "" : ",") + address.substr(0, colon);
    }
  }
  return out;
}

}  // namespace

void check_cluster_can_connect(const ClusterResolver& resolver, const Environment& env) {
  const int workers = resolver.num_workers();
  if (workers <= 1 || has_mpi_environment(env)) return;
  const std::string n = std::to_string(workers);
  const std::string why =
      ", but Lockstep's workers connect through MPI and no MPI launcher started this process";
  if (dynamic_cast<const SlurmClusterResolver*>(&resolver) != nullptr) {
    throw FailedPrecondition("SLURM describes a job step of " + n + " tasks (this is task " +
                             std::to_string(resolver.task_id()) + ")" + why +
                             " (no PMI variables): launch it with `srun --mpi=pmix -n " + n +
                             " lockstep train ...`, or `mpirun -np " + n +
                             " lockstep train ...` inside the allocation.");
  }
  const std::string source = dynamic_cast<const TFConfigClusterResolver*>(&resolver) != nullptr
                                 ? "TF_CONFIG"
                                 : "The cluster resolver";
  throw FailedPrecondition(
      source + " describes " + n + " workers (this is worker " +
      std::to_string(resolver.worker_index()) + ")" + why + ": start all " + n +
      " with one launcher, `mpirun -np " + n + " --host " + hosts_of(resolver.cluster_spec()) +
      " lockstep train ...` (or `srun --mpi=pmix -n " + n +
      " lockstep train ...` under SLURM), or unset " +
      (source == "TF_CONFIG" ? "TF_CONFIG" : "its variables") + " to train on this host alone.");
}

}  // namespace lockstep
