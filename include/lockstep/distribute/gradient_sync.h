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
// The caller then updates only its own block of the flat parameter space (owned_range), as
// DESIGN.md's "reduce-scatter, update the slice, all-gather" — the all-gather being implicit
// because the variables are shared memory — and must barrier before variables are read again.
//
// stats() reports, as seen by local replica 0, the accumulated wall time of the local
// reduce-scatter and of the cross-worker all-reduce (two steady_clock reads per phase and step).
// Each phase's time includes waiting for the slowest participant, so it is an upper bound on the
// transfer itself.
#include <cstdint>
#include <vector>

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/tensor.h"
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

  // The flat element range [begin, end) of the concatenated gradients local replica r updates.
  BlockRange owned_range(int local_replica) const;
  int64_t total_elements() const { return total_; }
  const SyncStats& stats() const { return stats_; }

 private:
  std::vector<Shape> shapes_;
  std::vector<int64_t> offsets_;
  int64_t total_ = 0;
  int num_local_;
  size_t bucket_elements_;
  DType cross_dtype_;
  std::vector<bfloat16> cross_buffer_;  // one bucket in bfloat16 (cross_dtype_ == bfloat16)
  std::vector<Tensor> packed_;          // G_r, one per local replica
  Tensor summed_;                       // S
  std::vector<Tensor> summed_views_;
  SyncStats stats_;  // written by local replica 0 only
};

}  // namespace lockstep::distribute
