#pragma once
// MPI for a program: initialise it, and get the communicator of all processes of the job
// (collectives between processes, one or many hosts, over Debian's Open MPI 4.1).
//
//   int main(int argc, char** argv) {
//     try {
//       auto& mpi = lockstep::distribute::mpi_initialize(&argc, &argv);
//       auto comm = mpi.world({.timeout_seconds = 60});
//       ... comm->all_reduce(grads, ReduceOp::SUM) ...
//     } catch (const std::exception& e) {
//       lockstep::distribute::abort_job(e);  // failure.h: ends every process of the job
//     }
//   }
//
// MpiContext is process-wide state because MPI is: MPI_Init_thread may run once per process and
// MPI_Finalize once, after which MPI cannot be restarted. It is created by the first
// mpi_initialize() call and finalises MPI at exit (or on finalize()).
//
// Collectives are non-blocking MPI calls (MPI_Iallreduce, MPI_Ireduce_scatter, MPI_Iallgather,
// MPI_Ibcast, MPI_Ibarrier) polled with MPI_Test until done or until timeout_seconds pass, so a
// lost peer cannot hang the others. The poll spins only briefly and then sleeps between polls, so
// a rank that waits for a slower one does not hold a core the slower one (or anyone else) needs.
// On timeout (or a transport error) the communicator asks every peer, on a second duplicated
// communicator, which collective it is in; peers that do not answer within a short grace period are
// reported as lost, with world rank, pid and host (exchanged at construction), grouped by host
// when a whole host is silent:
//   Unavailable: world rank 1 (pid 1234 on host node-a) stopped answering: it did not join
//   all_reduce #57 (float32[101770], SUM) within 10 s; it is stopped (process state T: SIGSTOP,
//   job control or a debugger). Seen from world rank 0.
// See docs/distributed.md ("Failures and timeouts") for launching so that survivors can report.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/distribute/collective.h"

namespace lockstep::distribute {

class MpiContext {
 public:
  ~MpiContext();
  MpiContext(const MpiContext&) = delete;
  MpiContext& operator=(const MpiContext&) = delete;

  // True when a process manager started this process (mpirun/mpiexec, srun with PMI): then MPI is
  // initialised. A plain `./program` runs as a world of one without touching MPI, so single-process
  // runs need neither mpirun nor a working MPI runtime.
  bool launched_by_mpirun() const { return launched_; }
  // MPI is initialised (by us or by the application before us) and not finalised.
  bool active() const;
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // The name of the thread level MPI granted (MPI_THREAD_SINGLE ... MPI_THREAD_MULTIPLE); we
  // request MULTIPLE. Collectives need at least SERIALIZED when called from a thread other than the
  // one that initialised MPI; one communicator is never used by two threads at once.
  std::string_view thread_level_name() const;

  // The communicator of all processes of the job: an MpiCommunicator over a duplicate of
  // MPI_COMM_WORLD when active(), else a one-rank shared-memory communicator. Collective: every
  // process must call it.
  std::shared_ptr<Communicator> world(const CommunicationOptions& options = {}) const;

  // The host name of every process of the job, indexed by world rank: an all-gather over
  // MPI_COMM_WORLD when active() (collective: every process must call it), else this host alone.
  std::vector<std::string> world_hosts() const;

  // Finalises MPI if this context initialised it (idempotent). After a collective failure MPI is
  // deliberately not finalised: MPI_Finalize would wait for the lost peer. Call abort_job() then.
  void finalize();

 private:
  friend MpiContext& mpi_initialize(int* argc, char*** argv);
  MpiContext(int* argc, char*** argv);
  bool launched_ = false;
  bool owns_mpi_ = false;
  bool finalized_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
  int thread_level_ = 0;  // set by the constructor (MPI_THREAD_SINGLE without MPI)
};

// Initialises MPI (MPI_Init_thread, requesting MPI_THREAD_MULTIPLE) on the first call when launched
// by a process manager, and returns the process-wide context; later calls return the same context
// and ignore their arguments. Thread-safe. If the application initialised MPI itself, that is
// respected and the application remains responsible for MPI_Finalize.
MpiContext& mpi_initialize(int* argc = nullptr, char*** argv = nullptr);

}  // namespace lockstep::distribute
