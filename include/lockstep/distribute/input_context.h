#pragma once
// InputContext: what an input function needs to know (tf.distribute.InputContext), and
// InputOptions: how many input pipelines distribute_datasets_from_function builds
// (tf.distribute.InputOptions).
#include <cstdint>

namespace lockstep::distribute {

// tf.distribute.InputReplicationMode. PER_WORKER: one pipeline per worker, whose elements are
// dealt to the worker's replicas in turn. PER_REPLICA: one pipeline per replica, each iterated on
// its replica's own thread during the step when it is infinite (see distributed_dataset.h).
enum class InputReplicationMode : int { PER_WORKER, PER_REPLICA };

struct InputOptions {
  InputReplicationMode experimental_replication_mode = InputReplicationMode::PER_WORKER;
};

struct InputContext {
  int num_input_pipelines = 1;  // workers (PER_WORKER) or replicas in sync (PER_REPLICA)
  int input_pipeline_id = 0;    // this worker's index, or this replica's global id
  int num_replicas_in_sync = 1;

  // global_batch_size / num_replicas_in_sync; throws InvalidArgument when it does not divide.
  int64_t get_per_replica_batch_size(int64_t global_batch_size) const;
};

}  // namespace lockstep::distribute
