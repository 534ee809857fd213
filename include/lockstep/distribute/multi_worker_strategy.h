#pragma once
// MultiWorkerMirroredStrategy: synchronous data parallelism over several processes (workers), each
// driving its own local replicas (tf.distribute.MultiWorkerMirroredStrategy).
//
//   // mpirun -np 2 ./train     (each process: LOCKSTEP_DEVICES=cpu:2, or its share of the cores)
//   distribute::MultiWorkerMirroredStrategy strategy({.timeout_seconds = 60});
//   strategy.num_replicas_in_sync();   // 4: workers x local replicas
//
// The cluster comes from a resolver (resolve_cluster() by default: the MPI launcher's environment,
// else SLURM, else TF_CONFIG, else this host alone). The processes talk through MPI: the world
// communicator (MpiContext::world(), mpi_context.h) joins the workers, so a multi-worker cluster
// must be started by an MPI launcher (mpirun, mpiexec, or srun with PMI); a resolver describing
// several workers in a process MPI did not start is an error. Started without a launcher, the
// strategy is one worker and behaves exactly as MirroredStrategy on the same devices.
//
// Every worker must drive the same number of local replicas (the hierarchical reductions and the
// data split assume it); the constructor checks this with an all-gather and throws
// InvalidArgument naming each worker's count otherwise. The constructor is collective: every
// worker must construct the strategy, in the same order relative to other collectives.
#include <memory>
#include <string>

#include "lockstep/distribute/cluster_resolver.h"
#include "lockstep/distribute/strategy.h"

namespace lockstep::distribute {

class MultiWorkerMirroredStrategy : public Strategy {
 public:
  // Resolves the cluster with resolve_cluster() (local devices: `devices`).
  explicit MultiWorkerMirroredStrategy(CommunicationOptions communication = {},
                                       LocalDeviceOptions devices = {});
  explicit MultiWorkerMirroredStrategy(const ClusterResolver& resolver,
                                       CommunicationOptions communication = {});

  const ClusterSpec& cluster_spec() const { return spec_; }
  // "worker" or "chief" (TF_CONFIG); the chief is worker_index() 0.
  const std::string& task_type() const { return task_type_; }
  bool is_chief() const { return worker_index() == 0; }

 private:
  struct Setup;
  static Setup make_setup(const ClusterResolver& resolver,
                          const CommunicationOptions& communication);
  MultiWorkerMirroredStrategy(Setup setup);
  ClusterSpec spec_;
  std::string task_type_;
};

}  // namespace lockstep::distribute
