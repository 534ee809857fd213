// The lost-worker scenario: `mpirun -np 3 failure_victim <timeout_s> <token>`.
// Every rank all-reduces a seed-model-sized gradient in a loop; rank 1 kills itself with SIGKILL
// in the middle (no handler, no goodbye: as a crashed or OOM-killed worker). The survivors must
// name rank 1 and end the job through abort_job. run_failure_test.sh checks the outcome.
// The token argument only makes this job's processes easy to find with pgrep.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <vector>

#include "distribute/collectives/mpi_communicator.h"
#include "lockstep/distribute/collective.h"
#include "lockstep/distribute/failure.h"

int main(int argc, char** argv) {
  using namespace lockstep::distribute;
  try {
    MpiContext& mpi = mpi_initialize(&argc, &argv);
    const double timeout = argc > 1 ? std::atof(argv[1]) : 10.0;
    auto comm = mpi.world({.timeout_seconds = timeout});
    std::vector<float> gradient(101770);
    for (int step = 0; step < 1000; ++step) {
      if (step == 57 && comm->rank() == 1) raise(SIGKILL);
      for (size_t i = 0; i < gradient.size(); ++i) gradient[i] = static_cast<float>(comm->rank());
      comm->all_reduce(std::span<float>(gradient), ReduceOp::SUM);
    }
    std::fprintf(stderr, "failure_victim: rank %d finished all steps; rank 1 should have died\n",
                 comm->rank());
    return 3;
  } catch (const std::exception& e) {
    abort_job(e);
  }
}
