#pragma once
// GradientSynchronizer: sums the gradients of every replica in sync, for a fixed list of gradient
// sizes (one model's trainable variables).
//
// Within a process the replicas share one flat buffer S. Each replica packs its gradients into
// its own flat buffer G_r; a reduce-scatter writes block r of the sum straight into S (replica r
// sums block r over all G's in rank order: deterministic), so after it every local replica sees
// the whole sum in S without an all-gather. Across workers, local replica 0 then all-reduces S
// over the workers (one collective per bucket of `bucket_bytes`) while the others wait.
//
// The caller then updates only its own block of the flat parameter space (owned_range): a
// reduce-scatter, update the slice, all-gather — the all-gather being implicit because the
// variables are shared memory — and must barrier before variables are read again.
//
// stats() reports, as seen by local replica 0, the accumulated wall time of the local
// reduce-scatter and of the cross-worker all-reduce (two steady_clock reads per phase and step).
// Each phase's time includes waiting for the slowest participant, so it is an upper bound on the
// transfer itself. In reduce_and_apply the local time is the wait for every replica's gradients
// plus the folds, without the optimizer's updates interleaved with them.
#include <atomic>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/tensor.h"
#include "lockstep/distribute/background_reducer.h"
#include "lockstep/distribute/collective.h"
#include "lockstep/distribute/replica_context.h"

namespace lockstep::distribute {

// Accumulated since the synchroniser was created (read it between steps, e.g. after fit).
struct SyncStats {
  uint64_t steps = 0;               // all_reduce calls of local replica 0
  double local_seconds = 0;         // local reduce-scatter, wall time on local replica 0
  double cross_worker_seconds = 0;  // cross-worker all-reduce (0 with one worker)
  size_t bytes_per_step = 0;        // bytes of one summed gradient buffer all-reduced per step:
                                    // across workers in the cross-worker dtype when there are
                                    // several, else the float32 local buffer
};

class GradientSynchronizer {
 public:
  // `shapes`: the gradients' shapes in order; gradients are summed in float32. `cross_worker_dtype`
  // (float32 or bfloat16) is the dtype of the cross-worker all-reduce only: with bfloat16, local
  // replica 0 rounds each bucket of S to bfloat16, all-reduces it and widens the sum back to
  // float32 (see CommunicationOptions::gradient_dtype for the trade-off).
  GradientSynchronizer(std::vector<Shape> shapes, int num_local_replicas,
                       size_t bucket_bytes = size_t{25} << 20,
                       DType cross_worker_dtype = DType::float32);

  // Called by every local replica with its gradients (undefined tensors count as zeros). Returns
  // views of the summed gradients, identical on all local replicas, valid until the next call.
  const std::vector<Tensor>& all_reduce(ReplicaContext& ctx, const std::vector<Tensor>& grads);

  // Gradient accumulation without communication (DDP's no_sync): adds this replica's gradients
  // to its own float32 accumulator and returns; nothing crosses replicas or workers. The next
  // all_reduce / reduce_and_apply of this replica sums its gradients plus everything accumulated
  // since (accumulated first, in call order) and empties the accumulator. Keras'
  // `gradient_accumulation_steps` runs on it: communication once per N steps.
  void accumulate(ReplicaContext& ctx, const std::vector<Tensor>& grads);

  // Views of local replica r's own flat buffer G_r, one per gradient (shaped like it). Gradients
  // computed straight into these views (GradientTape destinations) are not copied by
  // all_reduce / reduce_and_apply; any other tensor is copied in.
  const std::vector<Tensor>& gradient_buffers(int local_replica) const {
    return packed_views_[static_cast<size_t>(local_replica)];
  }

  // Called by every local replica: sums the gradients as all_reduce does and calls
  // apply(summed, begin, end) on pieces of the flat range, each right after the piece is summed
  // so that the update reads the sum while it is in cache. Every piece is summed and applied
  // exactly once, by one replica: first each replica's own range (owned_range), then whatever
  // pieces of the others' ranges they have not started yet (a replica that falls behind is
  // helped). `summed` are views of the whole sum; only [begin, end) of it is valid during the
  // call. `apply` may run concurrently on several replicas for disjoint ranges. On return every
  // replica's apply has finished (the caller needs no barrier before reading the variables). The
  // sums, hence the results of an elementwise update, are bit-identical to all_reduce's whoever
  // computes them. With workers, the cross-worker sum must be complete before any update: this
  // then runs all_reduce, one apply over the owned range and a barrier.
  // `apply` must be elementwise over the flat range (no norm over a whole gradient: clipnorm).
  template <typename Apply>
  void reduce_and_apply(ReplicaContext& ctx, const std::vector<Tensor>& grads, Apply&& apply) {
    ApplyRange ref(&apply, [](void* f, const std::vector<Tensor>& s, int64_t b, int64_t e) {
      (*static_cast<std::remove_reference_t<Apply>*>(f))(s, b, e);
    });
    reduce_and_apply_impl(ctx, grads, ref);
  }

  // Overlapping the cross-worker all-reduce with the backward pass (DDP's bucket hooks). With
  // several workers and more than one bucket, begin_overlap() returns true and the caller then
  // reports each gradient as soon as it is final with gradient_ready() (from
  // GradientTape::set_gradient_ready_callback). Buckets are groups of consecutive gradients of
  // about `bucket_bytes` (the first one at most kFirstBucketBytes, DDP's first_bucket_bytes),
  // formed from the last gradient backwards (the order backward produces them); when a bucket's
  // gradients are all ready, the local replicas sum it (reduce-scatter) and local replica 0 hands
  // it to a communication thread (BackgroundReducer) that all-reduces it across workers while
  // backward goes on. The all_reduce() / reduce_and_apply() that follows ships what is left and
  // waits. Results are bit-identical to the blocking path: the same buckets are summed in the same
  // order by the same calls. Returns false (nothing to overlap) with one worker or one bucket.
  // Called by every local replica before its backward pass.
  bool begin_overlap(ReplicaContext& ctx);
  void gradient_ready(ReplicaContext& ctx, size_t index, const Tensor& gradient);
  size_t num_buckets() const { return buckets_.size(); }
  static constexpr size_t kFirstBucketBytes = size_t{1} << 20;

  // The flat element range [begin, end) of the concatenated gradients local replica r updates.
  BlockRange owned_range(int local_replica) const;
  int64_t total_elements() const { return total_; }
  const SyncStats& stats() const { return stats_; }

 private:
  struct ApplyRange {
    void* fn;
    void (*call)(void*, const std::vector<Tensor>&, int64_t, int64_t);
    ApplyRange(void* f, void (*c)(void*, const std::vector<Tensor>&, int64_t, int64_t))
        : fn(f), call(c) {}
  };
  void pack(int local_replica, const std::vector<Tensor>& grads);
  void pack_one(int local_replica, size_t index, const Tensor& grad);
  const std::vector<Tensor>& all_reduce_across_workers(ReplicaContext& ctx, Communicator& cross);
  void ship_bucket(ReplicaContext& ctx, size_t bucket, Communicator& cross, bool background);

  // A bucket: gradients [first_var, end_var) = flat elements [begin, end).
  struct Bucket {
    size_t first_var = 0, end_var = 0;
    size_t begin = 0, end = 0;
  };
  std::vector<Bucket> buckets_;    // buckets_[0] holds the last gradients
  std::vector<size_t> bucket_of_;  // gradient index -> bucket
  // Per local replica, touched only by its own thread.
  struct ReplicaStep {
    bool overlapping = false;
    std::vector<size_t> ready;  // gradients of each bucket reported ready this step
    size_t next = 0;            // buckets [0, next) summed locally (and handed on by replica 0)
  };
  std::vector<ReplicaStep> steps_;
  std::vector<Tensor> accumulated_;  // A_r per local replica (allocated on first accumulate)
  std::vector<char> has_accumulated_;
  std::vector<std::vector<bfloat16>> cross_buckets_;  // bfloat16 copy per bucket in flight
  std::unique_ptr<BackgroundReducer> reducer_;        // created by local replica 0 when needed
  void reduce_and_apply_impl(ReplicaContext& ctx, const std::vector<Tensor>& grads,
                             const ApplyRange& apply);

  // Elements per piece of reduce_and_apply: small enough that a piece of the sum and the
  // optimizer's slots for it stay in L1/L2 between the fold and the update, and that a replica
  // that falls behind can be helped at a fine grain; large enough that the per-call work of
  // `apply` (a few checks) is noise.
  static constexpr size_t kPiece = 4096;
  struct alignas(64) PieceClaims {
    std::atomic<size_t> next{0};  // pieces of one replica's block claimed so far this step
  };
  std::unique_ptr<PieceClaims[]> claims_;

  std::vector<Shape> shapes_;
  std::vector<int64_t> offsets_;
  int64_t total_ = 0;
  int num_local_;
  size_t bucket_elements_;
  DType cross_dtype_;
  std::vector<Tensor> packed_;                     // G_r, one per local replica
  std::vector<std::vector<Tensor>> packed_views_;  // per replica, views of G_r per gradient
  Tensor summed_;                                  // S
  std::vector<Tensor> summed_views_;
  SyncStats stats_;  // written by local replica 0 only
};

}  // namespace lockstep::distribute
