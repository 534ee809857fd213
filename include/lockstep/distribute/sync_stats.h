#pragma once
// What the training step makes public: its statistics (Model::gradient_sync_stats) — nothing else.
//
// The step engine (ReplicatedStep and its parts: TaskPool, ReplicaRuns, GradientReducer,
// BufferedUpdate, under src/distribute/step/) is internal to the library. A user's training goes
// through Model::fit, or a custom loop: Strategy::run with a GradientTape, ReplicaContext's
// collectives and Optimizer::apply_gradients, none of which names the engine. What an optimizer
// supplies to the engine is the one public contract it has: ElementwiseUpdate
// (lockstep/distribute/elementwise_update.h). Keeping the rest internal leaves the engine free to
// change without breaking a user's build.
#include <cstddef>
#include <cstdint>

namespace lockstep::distribute {

// Accumulated since the step was created (read between steps).
struct SyncStats {
  uint64_t steps = 0;               // steps run (applying or accumulating)
  double local_seconds = 0;         // summing the replicas' gradients and updating, wall time
  double cross_worker_seconds = 0;  // cross-worker all-reduce (0 with one worker)
  size_t bytes_per_step = 0;        // bytes of one summed gradient buffer all-reduced per step:
                                    // across workers in the cross-worker dtype when there are
                                    // several, else the float32 local buffer
  uint64_t backup_runs = 0;         // backup task runs started, all steps
  uint64_t backup_wins = 0;         // tasks finished first by their backup run
  uint64_t backup_publishes = 0;    // updates a backup run won a chunk of, published through the
                                    // step's spare buffers (the first run may still be writing)
  uint64_t in_place_updates = 0;    // updates that wrote the weights and slots in place, with no
                                    // backups of their chunks (distribute/step/buffered_update.h)
  uint64_t bfloat16_gradient_chunks = 0;  // update chunk runs that read replicas' bfloat16
                                          // gradients (kernels multiplied in bfloat16)
};

}  // namespace lockstep::distribute
