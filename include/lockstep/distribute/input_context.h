#pragma once
// InputContext: what a per-worker input function needs to know (tf.distribute.InputContext).
#include <cstdint>

namespace lockstep::distribute {

struct InputContext {
  int num_input_pipelines = 1;  // one per worker
  int input_pipeline_id = 0;    // this worker's index
  int num_replicas_in_sync = 1;

  // global_batch_size / num_replicas_in_sync; throws InvalidArgument when it does not divide.
  int64_t get_per_replica_batch_size(int64_t global_batch_size) const;
};

}  // namespace lockstep::distribute
