#pragma once
// Cluster resolvers: who the workers of a job are, which one this process is, and which local
// devices (replicas) it drives. The names follow tf.distribute.cluster_resolver where the meaning
// is the same. Every resolver reads its inputs once, in its constructor, and validates them there,
// so a bad TF_CONFIG or SLURM environment fails before training starts, with an error naming the
// variable or field and the value received.
//
//   LocalCpuResolver          this host's cores, one process (the default)
//   AcceleratorClusterResolver  "the accelerator on this host" for the seed program's
//                             try/fallback flow: kind cuda/tpu throws NotFound today
//   TFConfigClusterResolver   TF_CONFIG JSON  {"cluster": {"worker": [...]}, "task": {...}}
//   SlurmClusterResolver      SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_NODELIST, ... (srun)
//   MpiClusterResolver        OMPI_COMM_WORLD_* / PMI_* set by mpirun; does not call MPI
//   resolve_cluster()         picks one of the above from the environment
//
// Local devices: each worker presents its cores as replicas (one per core by default, or groups
// of `cores_per_replica`). LOCKSTEP_DEVICES=cpu:N presents N replicas instead, assigned round-robin
// to the cores, for testing many replicas on a small machine (warns on stderr when N replicas
// need more cores than there are). An explicit LocalDeviceOptions::num_replicas wins over
// LOCKSTEP_DEVICES; LOCKSTEP_DEVICES wins over detection.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "lockstep/core/cpu_cores.h"
#include "lockstep/distribute/device.h"

namespace lockstep {

// tf.train.ClusterSpec: job name -> task addresses ("host:port"), indexed by task id.
struct ClusterSpec {
  std::map<std::string, std::vector<std::string>> jobs;

  // Tasks in `job`; 0 when the job is absent.
  int num_tasks(const std::string& job) const;
  // {"worker": ["host:port", ...], ...}, the "cluster" object of TF_CONFIG.
  nlohmann::json to_json() const;
  bool operator==(const ClusterSpec&) const = default;
};

// Where resolvers read environment variables: the process environment (read when the resolver is
// constructed) or a fixed map, so that tests describe an environment without mutating the
// process's.
class Environment {
 public:
  static Environment process();
  // Exactly these variables: Environment::fixed({{"SLURM_PROCID", "0"}, ...}).
  static Environment fixed(std::map<std::string, std::string> variables);
  std::optional<std::string> get(const std::string& name) const;

 private:
  Environment() = default;
  std::optional<std::map<std::string, std::string>> variables_;  // nullopt: getenv
};

// How a worker turns its cores into replicas.
struct LocalDeviceOptions {
  // Replicas on this worker; 0 = LOCKSTEP_DEVICES if set, else one per `cores_per_replica` cores.
  int num_replicas = 0;
  // Cores each replica is pinned to (a replica runs single-threaded kernels, so >1 only helps ops
  // that parallelise inside a replica).
  int cores_per_replica = 1;
  // OS cpu ids this worker may use; empty = available_cores(cgroup_root).
  std::vector<int> cores = {};
  // Root of the cgroup file system, read for CPU quotas; tests point it at a fake tree.
  std::string cgroup_root = kDefaultCgroupRoot;
};

// How the cores of this host were divided among the workers of the job that run on it (the local
// ranks of mpirun, the tasks of srun on one node). Each worker sees the cores it may use
// (available_cores()) and takes its share of them: a contiguous share when there are at least as
// many cores as local workers, else one core each, round-robin, so that local workers that
// outnumber the cores run one replica each (see MpiClusterResolver).
struct CoreDivision {
  int local_workers = 1;           // workers of the job on this host (this one included)
  int local_worker = 0;            // this worker's index among them
  std::vector<int> visible_cores;  // the cores this process could use before the division
  std::vector<int> cores;          // this worker's share
  int cores_per_worker = 0;        // SLURM_CPUS_PER_TASK; 0 when the launcher gave none

  // One line, e.g. "3 local workers on 2 cores [0,1]: more workers than cores, so one core each,
  // round-robin (local worker 0: core 0, 1: core 1, 2: core 0); this is local worker 2". The
  // other workers' shares are derived from this process's view, assuming (as with
  // `mpirun --bind-to none`) that every local worker sees the same cores.
  std::string to_string() const;
  bool operator==(const CoreDivision&) const = default;
};

// tf.distribute.cluster_resolver.ClusterResolver.
class ClusterResolver {
 public:
  virtual ~ClusterResolver();

  virtual ClusterSpec cluster_spec() const = 0;
  // Address of this task for a session/RPC layer; "" for a local, single-process cluster.
  virtual std::string master() const;
  // "worker", or "chief" for the TF_CONFIG task that coordinates.
  virtual std::string task_type() const;
  // This process's index within task_type().
  virtual int task_id() const;
  // Training processes: tasks of "chief" plus "worker" in cluster_spec(), at least 1.
  virtual int num_workers() const;
  // Replicas this worker drives (the length of local_devices()).
  virtual int num_accelerators() const = 0;
  virtual std::vector<DeviceSpec> local_devices() const = 0;
  // "mpi" when processes talk through MPI, otherwise "" (or TF_CONFIG's "rpc_layer").
  virtual std::string rpc_layer() const;
  // How this host's cores were divided among the job's local workers. Default: this worker
  // alone, on the cores of its devices.
  virtual CoreDivision core_division() const;

  // This process's index among all num_workers() training processes: the chief is 0 and worker i
  // follows the chiefs (MPI rank / SLURM_PROCID order for those resolvers).
  int worker_index() const;
};

// One process on this host, driving its available cores.
class LocalCpuResolver : public ClusterResolver {
 public:
  explicit LocalCpuResolver(LocalDeviceOptions options = {},
                            const Environment& env = Environment::process());

  ClusterSpec cluster_spec() const override;  // {"worker": ["localhost"]}
  int num_accelerators() const override;
  std::vector<DeviceSpec> local_devices() const override;

 private:
  std::vector<DeviceSpec> devices_;
};

struct AcceleratorOptions {
  // "auto" (the best kind present: cpu today), "cpu", "cuda" or "tpu".
  std::string kind = "auto";
  LocalDeviceOptions devices = {};
};

// The accelerator on this host: the resolver the seed program tries first, in place of
// TPUClusterResolver. Asking for a kind with no backend or no hardware throws NotFound, whose
// message says to fall back to the default strategy:
//
//   std::unique_ptr<AcceleratorStrategy> accelerator;
//   try {
//     AcceleratorClusterResolver resolver({.kind = "tpu"});
//     connect_to_cluster(resolver);
//     initialize_system(resolver);
//     accelerator = std::make_unique<AcceleratorStrategy>(resolver);
//   } catch (const NotFound&) {
//   }
//   Strategy& strategy = accelerator ? *accelerator : get_strategy();  // default: 1 replica
class AcceleratorClusterResolver : public ClusterResolver {
 public:
  explicit AcceleratorClusterResolver(AcceleratorOptions options = {},
                                      const Environment& env = Environment::process());
  explicit AcceleratorClusterResolver(DeviceKind kind,
                                      const Environment& env = Environment::process());

  DeviceKind kind() const { return kind_; }
  ClusterSpec cluster_spec() const override;
  int num_accelerators() const override;
  std::vector<DeviceSpec> local_devices() const override;

 private:
  DeviceKind kind_;
  std::vector<DeviceSpec> devices_;
};

// tf.distribute.cluster_resolver.TFConfigClusterResolver. TF_CONFIG is
//   {"cluster": {"chief": ["h0:2222"], "worker": ["h1:2222", "h2:2222"]},
//    "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc"}
// "cluster" and "task" are required; "rpc_layer" is optional; other keys (e.g. "environment") are
// ignored. Jobs "chief" and "worker" train; "evaluator" may be listed; "ps" is rejected because
// Lockstep trains synchronously with all-reduce, without parameter servers.
class TFConfigClusterResolver : public ClusterResolver {
 public:
  // Reads TF_CONFIG from `env`; throws NotFound when it is unset, InvalidArgument when malformed.
  explicit TFConfigClusterResolver(const Environment& env = Environment::process(),
                                   LocalDeviceOptions devices = {});
  // Parses `tf_config` itself (LOCKSTEP_DEVICES is still read from `env`).
  static TFConfigClusterResolver from_string(const std::string& tf_config,
                                             LocalDeviceOptions devices = {},
                                             const Environment& env = Environment::process());

  ClusterSpec cluster_spec() const override;
  std::string master() const override;  // "[rpc_layer://]host:port" of this task
  std::string task_type() const override;
  int task_id() const override;
  int num_accelerators() const override;
  std::vector<DeviceSpec> local_devices() const override;
  std::string rpc_layer() const override;

 private:
  TFConfigClusterResolver(const std::string& tf_config, const Environment& env,
                          LocalDeviceOptions devices);
  ClusterSpec spec_;
  std::string task_type_;
  int task_id_ = 0;
  std::string rpc_layer_;
  std::vector<DeviceSpec> devices_;
};

// tf.distribute.cluster_resolver.SlurmClusterResolver, for `srun -n 4 lockstep train ...`. Reads
// SLURM_PROCID (this task), SLURM_STEP_NUM_TASKS or SLURM_NTASKS, SLURM_STEP_NODELIST or
// SLURM_JOB_NODELIST or SLURM_NODELIST ("node[01-03],gpu7" forms are expanded),
// SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE ("2(x3),1"; when unset, tasks are spread in
// blocks as srun does), SLURM_LOCALID and SLURM_CPUS_PER_TASK (the step's own variables first,
// since a step may use part of the allocation). Tasks are numbered in block order (node 0's tasks
// first); addresses are "host:port" with port = port_base + the task's local index on its node.
// Every task is a "worker"; rpc_layer() is "mpi". Cores: local task r with SLURM_CPUS_PER_TASK=c
// takes cores [r*c, (r+1)*c) of what it sees, unless SLURM already bound it to fewer.
// Throws NotFound naming the missing variable, InvalidArgument naming a malformed one.
class SlurmClusterResolver : public ClusterResolver {
 public:
  explicit SlurmClusterResolver(const Environment& env = Environment::process(),
                                LocalDeviceOptions devices = {}, int port_base = 8888);

  ClusterSpec cluster_spec() const override;
  std::string master() const override;  // this task's "host:port"
  int task_id() const override;
  int num_accelerators() const override;
  std::vector<DeviceSpec> local_devices() const override;
  std::string rpc_layer() const override;
  CoreDivision core_division() const override;

 private:
  ClusterSpec spec_;
  int task_id_ = 0;
  CoreDivision division_;
  std::vector<DeviceSpec> devices_;
};

// Expands a SLURM host list: "node[01-03],gpu7" -> {"node01", "node02", "node03", "gpu7"};
// keeps zero padding, accepts several bracket groups and ranges ("r[1-2]n[3,5]"). Throws
// InvalidArgument naming the text on unbalanced brackets or bad ranges.
std::vector<std::string> expand_slurm_nodelist(const std::string& nodelist);
// Expands SLURM_TASKS_PER_NODE: "2(x3),1" -> {2, 2, 2, 1}.
std::vector<int> expand_slurm_tasks_per_node(const std::string& tasks_per_node);

// The cluster as launched by mpirun/mpiexec, read from the launcher's environment without calling
// MPI (the collectives own MPI_Init): OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE (Open MPI)
// or PMI_RANK/PMI_SIZE with MPI_LOCALRANKID/MPI_LOCALNRANKS (MPICH Hydra). Every rank is a
// "worker", task_id() is the rank, rpc_layer() is "mpi". Host names are not in the environment,
// so cluster_spec() lists "rank:<r>" placeholders; MPI addresses ranks, not hosts.
//
// Cores: local rank r of L on a host takes the r-th contiguous share of the cores it sees when
// there are at least L of them. When there are fewer (`mpirun --oversubscribe -np 3` on 2 cores,
// or a launcher that bound each rank to one core, as Open MPI does by default for 2 ranks), each
// rank takes one core, cores[r mod count], and so runs one replica. Use `--bind-to none` to let
// Lockstep divide the cores; core_division() says how it did.
class MpiClusterResolver : public ClusterResolver {
 public:
  // Throws NotFound when no launcher variables are set, InvalidArgument when they are malformed.
  explicit MpiClusterResolver(const Environment& env = Environment::process(),
                              LocalDeviceOptions devices = {});

  ClusterSpec cluster_spec() const override;
  int task_id() const override;
  int num_workers() const override;
  int num_accelerators() const override;
  std::vector<DeviceSpec> local_devices() const override;
  std::string rpc_layer() const override;

  CoreDivision core_division() const override;

  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

 private:
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  CoreDivision division_;
  std::vector<DeviceSpec> devices_;
};

// True when `env` holds the variables the resolver reads (Open MPI / Hydra rank, SLURM_PROCID,
// TF_CONFIG). SLURM counts only for a job step with more than one task, so a single-task
// `srun`/`sbatch` shell resolves locally.
bool has_mpi_environment(const Environment& env);
bool has_slurm_environment(const Environment& env);
bool has_tf_config_environment(const Environment& env);

// Lockstep's workers connect through MPI, so a cluster of several workers can only be formed by
// processes that an MPI launcher started (mpirun / mpiexec, or srun with PMI). Throws
// FailedPrecondition, in one line naming where the cluster was described (TF_CONFIG, SLURM) and
// the command that launches it, when `resolver` has several workers and `env` holds no MPI
// launcher variables; does nothing otherwise. `lockstep train` calls it before training so that a
// TF_CONFIG or SLURM cluster is never silently trained as independent single-worker jobs.
void check_cluster_can_connect(const ClusterResolver& resolver,
                               const Environment& env = Environment::process());

// Auto-detects the cluster: the MPI launcher's environment, else SLURM, else TF_CONFIG, else this
// host alone (LocalCpuResolver). Under `srun --mpi=pmix` both MPI and SLURM variables are set;
// MPI wins because MPI is what connects the processes.
std::unique_ptr<ClusterResolver> resolve_cluster(const Environment& env = Environment::process(),
                                                 LocalDeviceOptions devices = {});

}  // namespace lockstep
