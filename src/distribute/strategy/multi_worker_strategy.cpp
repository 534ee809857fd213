#include "lockstep/distribute/multi_worker_strategy.h"

#include <cstdint>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/distribute/mpi_context.h"
#include "lockstep/distribute/strategies.h"

namespace lockstep::distribute {

struct MultiWorkerMirroredStrategy::Setup {
  StrategyConfig config;
  std::shared_ptr<Communicator> cross;
  ClusterSpec spec;
  std::string task_type;
};

namespace {
constexpr const char* kName = "MultiWorkerMirroredStrategy";
}  // namespace

MultiWorkerMirroredStrategy::Setup MultiWorkerMirroredStrategy::make_setup(
    const ClusterResolver& resolver, const CommunicationOptions& communication) {
  Setup s;
  MpiContext& mpi = mpi_initialize();
  const int workers = resolver.num_workers();
  if (workers != mpi.world_size()) {
    if (!mpi.launched_by_mpirun()) {
      throw FailedPrecondition(
          std::string(kName) + ": the cluster has " + std::to_string(workers) +
          " workers but this process was not started by an MPI launcher. Workers communicate "
          "through MPI: start every worker with `mpirun -np " +
          std::to_string(workers) + " ...` or `srun -n " + std::to_string(workers) +
          " --mpi=pmix ...` (see docs/distributed.md, \"Multi-worker training\").");
    }
    throw InvalidArgument(std::string(kName) + ": the cluster resolver describes " +
                          std::to_string(workers) + " workers but MPI started " +
                          std::to_string(mpi.world_size()) + " processes.");
  }
  if (workers > 1 && resolver.worker_index() != mpi.world_rank()) {
    throw InvalidArgument(
        std::string(kName) + ": this process is worker " + std::to_string(resolver.worker_index()) +
        " for the cluster resolver but MPI rank " + std::to_string(mpi.world_rank()) +
        "; launch so that the two orders agree (one task per MPI rank).");
  }
  s.config = config_for_devices(kName, resolver.local_devices(), communication);
  s.spec = resolver.cluster_spec();
  s.task_type = resolver.task_type();
  if (workers == 1) return s;  // one worker: exactly MirroredStrategy, no cross-worker hops

  s.cross = mpi.world(communication);
  // The hierarchical reductions and the split of every global batch assume the same number of
  // replicas on every worker; a mismatch would silently drop or double-count examples.
  auto local = static_cast<int32_t>(s.config.replica_cores.size());
  std::vector<int32_t> counts(static_cast<size_t>(workers));
  s.cross->all_gather(&local, counts.data(), 1, DType::int32);
  for (int32_t c : counts) {
    if (c != counts[0]) {
      std::string list;
      for (size_t w = 0; w < counts.size(); ++w) {
        list += (w ? ", " : "") + std::string("worker ") + std::to_string(w) + ": " +
                std::to_string(counts[w]);
      }
      throw InvalidArgument(std::string(kName) +
                            ": every worker must have the same number of local replicas. "
                            "Received " +
                            list +
                            ". Set LOCKSTEP_DEVICES=cpu:N (or LocalDeviceOptions::num_replicas) "
                            "to the same N on every worker.");
    }
  }
  s.config.cross_worker = s.cross;
  s.config.shares_host_with_workers = resolver.core_division().local_workers > 1;
  return s;
}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(CommunicationOptions communication,
                                                         LocalDeviceOptions devices)
    : MultiWorkerMirroredStrategy(
          make_setup(*resolve_cluster(Environment::process(), devices), communication)) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(const ClusterResolver& resolver,
                                                         CommunicationOptions communication)
    : MultiWorkerMirroredStrategy(make_setup(resolver, communication)) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(Setup setup)
    : Strategy(std::move(setup.config)),
      spec_(std::move(setup.spec)),
      task_type_(std::move(setup.task_type)) {}

}  // namespace lockstep::distribute
