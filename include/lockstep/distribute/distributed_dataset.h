#pragma once
// DistributedDataset: a dataset whose elements are PerReplica<Element>, one slice per local
// replica (tf.distribute.DistributedDataset).
//
// From experimental_distribute_dataset(ds): ds yields *global* batches. Each global batch of b
// rows is cut into num_replicas_in_sync consecutive slices of ceil(b / N) rows (the last ones
// shorter, possibly empty) — tf.distribute's rebatching: range(6).batch(4) on 2 replicas gives
// [0,1] [2,3] then [4] [5]; range(4).batch(4) on 5 replicas gives [0] [1] [2] [3] []. Slices are
// views of the batch (no copy). In a multi-worker job every worker iterates the same global
// batches (same pipeline, same seeds) and keeps the slices of its own replicas, so N workers see
// exactly what one process with N× replicas would. This is AutoShardPolicy::DATA ("shard by
// data", tf.data.experimental.AutoShardPolicy): results are independent of how the replicas are
// spread over workers. Other policies (experimental_distribute_dataset(ds, policy)):
//
//   AUTO   the same as DATA: tf's AUTO tries FILE first, and no Lockstep source reads files.
//   OFF    each worker's dataset is used as is: its batches are *per-worker* batches (of size
//          global / workers), each split among the worker's local replicas by the rule above.
//          Workers must then feed different data themselves (e.g. Dataset::shard or seeds per
//          worker); the global batch size is taken as the local one times the workers.
//   FILE   shards the input files among workers; throws InvalidArgument because Lockstep's
//          sources (tensor slices, range, generators) are in memory, so there are no files.
//
// From distribute_datasets_from_function(fn): fn(InputContext) builds this worker's dataset,
// which yields per-replica batches; local replica r of step s gets element s * L + r. If the
// dataset ends inside a step, the remaining replicas get empty batches.
//
// Iteration runs on the host thread; put prefetch() in the pipeline so the next global batch is
// prepared while the replicas compute.
#include <functional>
#include <memory>
#include <optional>

#include "lockstep/data/dataset.h"
#include "lockstep/distribute/input_context.h"
#include "lockstep/distribute/per_replica.h"

namespace lockstep::distribute {

enum class AutoShardPolicy : int { AUTO, FILE, DATA, OFF };

// Cuts `batch` (every component along axis 0) into `num_slices` views by the rule above and
// returns slices [first, first + count).
std::vector<Element> split_batch(const Element& batch, int num_slices, int first, int count);

class DistributedDataset {
 public:
  enum class Mode { kSplitGlobalBatches, kSplitWorkerBatches, kPerReplicaBatches };

  DistributedDataset(Dataset dataset, Mode mode, int num_local_replicas, int num_replicas_in_sync,
                     int first_local_replica);

  class Iterator {
   public:
    // The next step's per-replica inputs, or nullopt at the end.
    std::optional<PerReplica<Element>> next();
    // The global batch size of the last step returned (all replicas in sync).
    int64_t last_global_batch_size() const { return last_global_batch_; }
    IteratorState state() const { return it_.state(); }

   private:
    friend class DistributedDataset;
    Iterator(const DistributedDataset& owner, lockstep::Iterator it);
    const DistributedDataset* owner_;
    lockstep::Iterator it_;
    int64_t last_global_batch_ = 0;
  };

  Iterator make_iterator() const;
  Iterator make_iterator(const IteratorState& state) const;
  const Dataset& dataset() const { return dataset_; }
  Mode mode() const { return mode_; }
  int num_local_replicas() const { return num_local_; }

 private:
  Dataset dataset_;
  Mode mode_;
  int num_local_;
  int num_in_sync_;
  int first_local_;
};

}  // namespace lockstep::distribute
