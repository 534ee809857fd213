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
//   AUTO   FILE when there are several workers and the pipeline reads at least as many files as
//          workers in each of its file lists (Dataset::input_files), else DATA, as tf.data.
//   OFF    each worker's dataset is used as is: its batches are *per-worker* batches (of size
//          global / workers), each split among the worker's local replicas by the rule above.
//          Workers must then feed different data themselves (e.g. Dataset::shard or seeds per
//          worker); the global batch size is taken as the local one times the workers.
//   FILE   each worker's pipeline reads only its files (Dataset::shard_files(workers, index):
//          files j with j mod workers == index of every list_files stage and file source), and
//          its batches are per-worker batches split among its replicas, as with OFF. A finite
//          pipeline is cut to the smallest worker's number of batches (counted, one pass if the
//          cardinality is unknown, and agreed by an all-reduce), so workers whose files hold
//          different record counts take the same steps; an infinite one (cardinality kInfinite,
//          or repeats_forever) is not counted and is bounded by steps_per_epoch. InvalidArgument
//          when the pipeline reads no files or fewer files than workers. Unlike DATA, the result
//          depends on the number of workers (each sees other examples in other batches): N workers
//          are no longer one process with N x replicas.
//
// From distribute_datasets_from_function(fn): fn(InputContext) builds this worker's dataset,
// which yields per-replica batches; local replica r of step s gets element s * L + r. If the
// dataset ends inside a step, the remaining replicas get empty batches.
//
// From distribute_datasets_from_function(fn, {PER_REPLICA}): fn is called once per local replica
// (input_pipeline_id = the replica's global id, num_input_pipelines = replicas in sync) and
// replica r's step s gets element s of its own dataset. When every one of these datasets is
// infinite (repeat()), fit pulls each replica's element on the replica's thread inside the step
// (next_on_replica): the input work (shuffling, gathering rows, map functions) is split over the
// cores instead of running on one host thread that competes with the replicas for them. Finite
// datasets are pulled by the host instead (next()), so that a step where every pipeline has
// ended is known before it runs; a replica whose pipeline ended earlier gets empty batches.
//
// Iteration runs on the host thread; put prefetch() in the pipeline so the next global batch is
// prepared while the replicas compute.
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

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
  enum class Mode {
    split_global_batches,
    split_worker_batches,
    per_replica_batches,
    per_replica_pipelines
  };

  DistributedDataset(Dataset dataset, Mode mode, int num_local_replicas, int num_replicas_in_sync,
                     int first_local_replica);
  // Mode::per_replica_pipelines: one dataset per local replica.
  DistributedDataset(std::vector<Dataset> per_replica, int num_replicas_in_sync,
                     int first_local_replica);

  class Iterator {
   public:
    // The next step's per-replica inputs, or nullopt at the end.
    std::optional<PerReplica<Element>> next();
    // The global batch size of the last step returned (all replicas in sync).
    int64_t last_global_batch_size() const { return last_global_batch_; }
    // Per-replica pipelines that never end: each replica may pull its own elements with
    // next_on_replica, concurrently with the others.
    bool fetches_on_replicas() const;
    // Local replica r's next element (Mode::per_replica_pipelines only; from replica r's thread).
    // Throws OutOfRange if its dataset ended, which fetches_on_replicas() rules out.
    Element next_on_replica(int local_replica);
    // Per-replica pipelines: pulls one replica's next element ahead of its next_on_replica (or
    // next), on any thread — a thread with nothing else to do in a step (fit hands this to the
    // step's idle threads). The first replica from `first` on (then from 0) without a staged
    // element whose pipeline no other thread is pulling from gets one; false when there is none
    // (or another mode). Staging changes no element nor their order, nor state(): a staged element
    // counts as not yet pulled. An error of the pull is kept for the replica's next pull to throw.
    bool stage_next(int first = 0);
    // The position to resume from, counted in steps, so that it means the same on any number of
    // replicas: global or per-worker batches are one per step, per-replica pipelines advance
    // together (one element each per step; after uneven ends, the furthest), and a per-worker
    // dataset of per-replica batches gives L elements per step on L local replicas. After
    // make_iterator(state) on another number of replicas, every input continues at that step:
    // the same global batches for a global pipeline, and for per-replica batches the samples
    // after the first steps x (global batch) of the order the new layout's datasets define.
    IteratorState state() const;

   private:
    friend class DistributedDataset;
    Iterator(const DistributedDataset& owner, std::vector<lockstep::Iterator> its);
    // Per-replica pipelines: what stage_next pulled ahead for a replica, under its pipeline's
    // lock (held by whoever pulls from it).
    struct Staged {
      std::mutex mu;
      bool has = false;
      std::optional<Element> element;  // nullopt: the pipeline ended
      std::exception_ptr error;
      IteratorState before;  // the pipeline's state before the staged pull
    };
    // Replica r's next element: the staged one, or pulled now (with its lock held).
    std::optional<Element> take(size_t r);
    const DistributedDataset* owner_;
    std::vector<lockstep::Iterator> its_;          // one, or one per local replica
    std::vector<std::unique_ptr<Staged>> staged_;  // per local replica (per-replica pipelines)
    int64_t last_global_batch_ = 0;
  };

  Iterator make_iterator() const;
  // Continues at `state` (Iterator::state(), in steps), also one saved on another layout.
  Iterator make_iterator(const IteratorState& state) const;
  // The (first) underlying dataset: local replica 0's with per-replica pipelines.
  const Dataset& dataset() const { return datasets_.front(); }
  // Steps until the input ends: Dataset::kInfinite, Dataset::kUnknown, or a count (per-worker
  // datasets: elements, or elements / local replicas rounded up for per_replica_batches;
  // per-replica pipelines: the longest).
  int64_t cardinality() const;
  Mode mode() const { return mode_; }
  int num_local_replicas() const { return num_local_; }
  // Whether each worker reads its own files (AutoShardPolicy::FILE, or AUTO that chose it): the
  // examples a step sees then depend on the number of workers.
  bool sharded_by_file() const { return sharded_by_file_; }

 private:
  friend class Strategy;  // marks FILE sharding
  std::vector<Dataset> datasets_;
  Mode mode_;
  int num_local_;
  int num_in_sync_;
  int first_local_;
  bool sharded_by_file_ = false;
};

}  // namespace lockstep::distribute
