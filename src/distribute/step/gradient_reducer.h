#pragma once
// GradientReducer: the replicas' gradients summed into one, as the update reads it.
//
//   * Within a worker, in replica order: element i of the sum is ((a[i] + g_0[i]) + g_1[i]) + ...
//     over the accumulator a (when steps accumulated) and the committed runs that have a gradient
//     for it, chunk by chunk, whatever thread sums a chunk and however many there are.
//   * A step that only accumulates (gradient accumulation) adds that sum to a double-buffered
//     accumulator, which the next step's sum starts from.
//   * Across workers, the local sum is all-reduced through a CommHook (float32, or bfloat16 on the
//     wire). With one local replica the all-reduce overlaps the backward pass: buckets of
//     consecutive variables, formed from the last (the order backward finishes them), are shipped
//     by a BackgroundReducer as soon as the replica's run has reported each of their gradients.
//
// Which run reported first does not matter: every run of a replica computes the same bits.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "chunk_layout.h"
#include "comm_hook.h"
#include "lockstep/core/tensor.h"
#include "replica_runs.h"

namespace lockstep::distribute {

class BackgroundReducer;
class Communicator;
class TaskPool;

class GradientReducer final : public GradientSink {
 public:
  // `cross`: the communicator between workers (nullptr with one); `hook` how sums cross it;
  // `bytes_per_bucket` the overlap's bucket size (0: 25 MiB, as DDP).
  GradientReducer(const ChunkLayout& layout, std::shared_ptr<Communicator> cross,
                  std::unique_ptr<CommHook> hook, size_t bytes_per_bucket);
  ~GradientReducer();

  // ---- The sum in replica order. What a phase sums, fixed when it starts (a late run of it
  // must read the same runs).
  struct Terms {
    const std::vector<ReplicaRun*>* runs = nullptr;
    const float* accumulator = nullptr;  // summed first, when steps accumulated
  };
  Terms terms(const std::vector<ReplicaRun*>& runs) const;
  // One term of a chunk: float32, or a replica's bfloat16 gradient (ReplicaRun::gradient_dtype),
  // widened as it is summed.
  struct Term {
    const float* f32 = nullptr;
    const bfloat16* bf16 = nullptr;
  };
  // The chunk's terms in their fixed order; returns how many there are, writing at most two.
  static int chunk_terms(const Chunk& c, const Terms& in, Term terms[2]);
  // The chunk's sum into out (zeros when no term has it).
  static void sum_chunk(const Chunk& c, const Terms& in, float* out);
  // The only term of the chunk when it is a replica's float32 gradient alone (no accumulator),
  // else nullptr: the sum is that gradient as it is.
  static const float* sole_gradient(const Chunk& c, const Terms& in);

  // ---- Accumulation (steps that do not apply).
  // Adds this step's sum to the accumulator, as tasks of `pool`.
  void accumulate(TaskPool& pool, const std::vector<ReplicaRun*>& runs);
  bool has_accumulated() const { return acc_valid_; }
  // The accumulator went into an update.
  void clear_accumulated() { acc_valid_ = false; }

  // ---- The local sum as one buffer, and across workers.
  // The local sum, with `extra` writable elements after it: the only local replica's gradient
  // buffer when it has every gradient and nothing accumulated (no copy), else summed into the
  // reducer's buffer as tasks of `pool`.
  float* local_sum(TaskPool& pool, const std::vector<ReplicaRun*>& runs);
  // Sums sum[0, total + extra) across workers in place (the extra elements ride along).
  void all_reduce(float* sum, int64_t extra = 0);
  DType wire_dtype() const;
  // ||g_i||² per variable of a summed gradient, in float64 and a fixed order.
  std::vector<double> squared_norms(const float* sum) const;

  // ---- Overlap with backward (one local replica, several workers).
  bool can_overlap() const { return cross_ != nullptr && buckets_.size() > 1; }
  size_t num_buckets() const;
  // Before the replicas' phase (no run of an earlier step may read the sum any more).
  void begin_overlap();
  // A replica function called a collective: the step runs as a gang without overlap. Throws
  // Internal when a bucket already left (the collective came after the backward pass began).
  void cancel_overlap();
  void gradient_ready(ReplicaRun& run, size_t variable) override;
  // Waits for what is left of the all-reduce after backward; returns the summed gradient.
  float* finish_overlap();

 private:
  struct Bucket {
    size_t first_var = 0, end_var = 0;  // variables [first_var, end_var)
    int64_t begin = 0, end = 0;         // their flat elements
  };
  class SumPhase;
  void make_buckets(size_t bytes_per_bucket);
  void bucket_ready(const ReplicaRun& run, size_t bucket);
  void ensure_sum_buffer();
  void ensure_scratch(const TaskPool& pool);

  const ChunkLayout& layout_;
  std::shared_ptr<Communicator> cross_;
  std::unique_ptr<CommHook> hook_;

  Tensor accumulator_[2];
  int acc_current_ = 0;
  bool acc_valid_ = false;
  Tensor summed_;  // the local sum and, across workers, the all-reduced one
  std::unique_ptr<SumPhase> accumulate_phase_, sum_phase_;
  std::vector<std::vector<float>> scratch_;  // per pool thread, chunk-sized

  std::vector<Bucket> buckets_;    // buckets_[0] holds the last variables
  std::vector<size_t> bucket_of_;  // variable -> bucket
  std::unique_ptr<std::atomic<uint32_t>[]> bucket_claimed_;
  std::vector<char> bucket_filled_;  // guarded by bucket_mu_
  size_t buckets_enqueued_ = 0;      // guarded by bucket_mu_
  std::mutex bucket_mu_;
  std::condition_variable bucket_cv_;
  std::unique_ptr<BackgroundReducer> background_;
  bool overlap_accumulator_ = false;  // the accumulator joins the buckets this step
};

}  // namespace lockstep::distribute
