#include "local_devices.h"
#include "lockstep/distribute/cluster_resolver.h"

namespace lockstep {

bool has_slurm_environment(const Environment& env) {
  // An sbatch script sees SLURM_NTASKS of the whole allocation but runs as one process: only a
  // job step started by srun (SLURM_STEP_ID) with several tasks is a multi-worker cluster.
  auto procid = env.get("SLURM_PROCID");
  auto step = env.get("SLURM_STEP_ID");
  if (!procid || !step) return false;
  auto tasks = env.get("SLURM_STEP_NUM_TASKS");
  if (!tasks) tasks = env.get("SLURM_NTASKS");
  if (!tasks) return false;
  try {
    return cluster_internal::parse_env_int("SLURM_NTASKS", *tasks, 1) > 1;
  } catch (const std::exception&) {
    return true;  // malformed: let SlurmClusterResolver report it by name
  }
}

bool has_tf_config_environment(const Environment& env) {
  auto value = env.get("TF_CONFIG");
  return value && !value->empty();
}

std::unique_ptr<ClusterResolver> resolve_cluster(const Environment& env,
                                                 LocalDeviceOptions devices) {
  if (has_mpi_environment(env)) return std::make_unique<MpiClusterResolver>(env, devices);
  if (has_slurm_environment(env)) return std::make_unique<SlurmClusterResolver>(env, devices);
  if (has_tf_config_environment(env)) {
    return std::make_unique<TFConfigClusterResolver>(env, devices);
  }
  return std::make_unique<LocalCpuResolver>(devices, env);
}

}  // namespace lockstep
