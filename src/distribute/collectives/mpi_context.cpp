// MpiContext: starting MPI for the program (with Lockstep's transport defaults), the world
// communicator, and finalising MPI at exit unless a peer was lost.
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "lockstep/core/check.h"
#include "lockstep/core/error.h"
#include "lockstep/distribute/mpi_context.h"
#include "lockstep/distribute/shared_memory_group.h"
#include "mpi_communicator.h"
#include "mpi_diagnosis.h"
#include "mpi_support.h"

namespace lockstep::distribute {
namespace {

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

// Open MPI's shared-memory transport (btl/vader) moves large messages between processes of one
// host with a single-copy mechanism, by default CMA (process_vm_readv: one system call per
// fragment and, in containers, often refused by the ptrace policy, which makes Open MPI print
// warnings and fall back). For gradient-sized messages (0.1-25 MB) the copy through the shared
// segment was faster on every machine we measured (docs/performance.md, "Multi-worker (MPI)
// throughput"), so Lockstep makes it the default. MCA settings the user gave (mpirun
// --mca ..., or the OMPI_MCA_ variable) win: setenv with overwrite = 0, before MPI_Init, where
// Open MPI reads its parameters. LOCKSTEP_MPI_TRANSPORT_DEFAULTS=0 turns this off.
void apply_transport_defaults() {
  const char* off = std::getenv("LOCKSTEP_MPI_TRANSPORT_DEFAULTS");
  if (off != nullptr && std::string_view(off) == "0") return;
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", /*overwrite=*/0);
}

}  // namespace

MpiContext::MpiContext(int* argc, char*** argv) {
  thread_level_ = MPI_THREAD_SINGLE;
  launched_ = env_set("OMPI_COMM_WORLD_SIZE") || env_set("PMIX_RANK") || env_set("PMI_RANK") ||
              env_set("PMI_SIZE");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    MPI_Query_thread(&thread_level_);
  } else if (launched_) {
    apply_transport_defaults();
    detail::check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_),
                      "MPI_Init_thread");
    owns_mpi_ = true;
  } else {
    return;  // a world of one, without MPI
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
}

MpiContext::~MpiContext() {
  finalize();
}

bool MpiContext::active() const {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

std::string_view MpiContext::thread_level_name() const {
  switch (thread_level_) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

std::shared_ptr<Communicator> MpiContext::world(const CommunicationOptions& options) const {
  if (!active()) {
    LOCKSTEP_CHECK_AS(FailedPrecondition, !finalized_,
                      "MpiContext::world: MPI was already finalised");
    return SharedMemoryGroup(1, options).communicator(0);
  }
  return std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, options);
}

std::vector<std::string> MpiContext::world_hosts() const {
  if (!active()) return {detail::local_host_name()};
  struct Wire {
    char host[detail::kHostBytes];
  };
  Wire mine{};
  const std::string host = detail::local_host_name();
  std::memcpy(mine.host, host.data(), std::min(host.size(), sizeof mine.host - 1));
  std::vector<Wire> all(static_cast<size_t>(world_size_));
  detail::check_mpi(MPI_Allgather(&mine, sizeof(Wire), MPI_BYTE, all.data(), sizeof(Wire), MPI_BYTE,
                                  MPI_COMM_WORLD),
                    "MPI_Allgather (host names)");
  std::vector<std::string> hosts;
  for (const Wire& w : all) hosts.emplace_back(w.host, strnlen(w.host, sizeof w.host));
  return hosts;
}

void MpiContext::finalize() {
  if (finalized_) return;
  finalized_ = true;
  if (!owns_mpi_ || detail::job_failed()) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

MpiContext& mpi_initialize(int* argc, char*** argv) {
  // A function-local static: constructed once, thread-safely, and destroyed (finalising MPI) at
  // exit after main returns.
  static MpiContext context(argc, argv);
  return context;
}

}  // namespace lockstep::distribute
