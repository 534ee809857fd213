#pragma once
// ReplicatedStep: one synchronous training step over every replica in sync, run as tasks.
//
//   1. Every local replica's function (forward + backward on its slice of the global batch) is a
//      task of the strategy's TaskPool. A run writes its gradients and its RunState (loss sums,
//      metrics) into a private slot; the first run of each replica to finish commits it. A replica
//      whose thread stalls is re-run by an idle thread (task_pool.h), so one descheduled thread
//      cannot hold the step.
//   2. The gradients are summed over the local replicas, element i as
//      ((g_0[i] + g_1[i]) + g_2[i]) + ... in replica order, chunk by chunk; across workers the
//      local sums are then all-reduced (MPI). Each chunk's sum goes straight into the optimizer's
//      elementwise rule (ElementwiseUpdate), computed into the running thread's scratch; the
//      chunk's first run to finish copies the weights and the optimizer's slots to their *next*
//      buffers (Variable::enable_next_buffer): a chunk run twice computes the same bits, and only
//      its first run writes. When every chunk is written, the variables flip to their next
//      buffers.
//   3. A step that only accumulates (gradient accumulation) adds the sum to an accumulator,
//      double-buffered the same way; the step that applies adds the accumulator first.
//
// Nothing depends on which thread ran what: sums run in a fixed order over replicas and chunks,
// so for a given number of replicas the weights are bit-identical on any number of threads.
//
// Collectives inside the replica function (a layer that all-reduces statistics) need every
// replica to run at once; a task that calls one throws CollectiveInTask, and the step then runs
// its replicas as a gang — one thread each, as Strategy::run does — from then on. The sum and the
// update stay tasks.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "lockstep/autodiff/variable.h"
#include "lockstep/core/bfloat16.h"
#include "lockstep/core/tensor.h"
#include "lockstep/distribute/elementwise_update.h"
#include "lockstep/distribute/replica_context.h"

namespace lockstep::distribute {

class Strategy;
class BackgroundReducer;
class ReplicatedStep;

// Accumulated since the step was created (read between steps).
struct SyncStats {
  uint64_t steps = 0;               // steps run (applying or accumulating)
  double local_seconds = 0;         // summing the replicas' gradients and updating, wall time
  double cross_worker_seconds = 0;  // cross-worker all-reduce (0 with one worker)
  size_t bytes_per_step = 0;        // bytes of one summed gradient buffer all-reduced per step:
                                    // across workers in the cross-worker dtype when there are
                                    // several, else the float32 local buffer
  uint64_t backup_runs = 0;         // backup task runs started (TaskPool), all steps
  uint64_t backup_wins = 0;         // tasks finished first by their backup run
  uint64_t backup_publishes = 0;    // updates a backup run won a chunk of, published through the
                                    // step's spare buffers (the first run may still be writing)
};

// What a replica's run carries besides its gradients (the trainer's loss sums and metrics).
struct RunState {
  virtual ~RunState() = default;
};

// One run of one replica's function: private until it commits.
class ReplicaRun {
 public:
  int replica() const { return replica_; }
  // float32 buffers shaped like the step's variables: pass them to GradientTape::gradient as
  // destinations so the gradients are not copied.
  const std::vector<Tensor>& gradient_buffers() const { return views_; }
  // Records this run's gradients, one per variable (undefined: none, counted as zeros); tensors
  // other than gradient_buffers() are copied in. Shapes must match the variables'.
  void set_gradients(const std::vector<Tensor>& grads);
  // The RunState made by the step's factory (nullptr without one).
  RunState* state() const { return state_.get(); }
  // Overlap of the cross-worker sum with the backward pass (DDP's bucket hooks): when true, the
  // replica function reports each gradient as soon as it is final with gradient_ready()
  // (GradientTape::set_gradient_ready_callback), and buckets of finished gradients start crossing
  // workers while backward goes on.
  bool overlaps_communication() const { return overlap_; }
  void gradient_ready(size_t variable, const Tensor& gradient);

 private:
  friend class ReplicatedStep;
  friend class ReplicaContext;
  void reset(int replica, bool overlap);
  void commit();
  void* find_local(const void* shared) const;
  void add_local(const void* shared, std::shared_ptr<void> copy, std::function<void()> commit);
  void add_commit(std::function<void()> fn) { commits_.push_back(std::move(fn)); }
  void add_deferred_sum(const void* key, const Tensor& value,
                        std::function<void(const Tensor&)> apply) {
    deferred_.push_back({key, value, std::move(apply)});
  }

  int replica_ = 0;
  ReplicatedStep* step_ = nullptr;
  bool overlap_ = false;
  std::vector<int> bucket_ready_;  // per bucket: its gradients this run has reported
  Tensor flat_;
  std::vector<Tensor> views_;
  std::vector<char> defined_;
  std::unique_ptr<RunState> state_;
  struct Local {
    const void* shared;
    std::shared_ptr<void> copy;
    std::function<void()> commit;
  };
  std::vector<Local> locals_;
  std::vector<std::function<void()>> commits_;
  struct Deferred {
    const void* key;
    Tensor value;
    std::function<void(const Tensor&)> apply;
  };
  std::vector<Deferred> deferred_;
};

class ReplicatedStep {
 public:
  using ReplicaFn = std::function<void(ReplicaContext&, ReplicaRun&)>;

  // `vars`: the trainable variables (float32), in the order of the gradients; `update` is bound
  // to them and must outlive the step; `make_state` makes each run slot's RunState.
  ReplicatedStep(Strategy& strategy, std::vector<Variable> vars, ElementwiseUpdate& update,
                 std::function<std::unique_ptr<RunState>()> make_state = {});
  ~ReplicatedStep();
  ReplicatedStep(const ReplicatedStep&) = delete;
  ReplicatedStep& operator=(const ReplicatedStep&) = delete;

  // One step: fn on every local replica, then the gradients summed over all replicas in sync and
  // applied (apply = true) or accumulated for the next applying step (apply = false: nothing
  // crosses workers, as DDP's no_sync).
  //
  // A run that lost to its backup may still be executing fn after run() returns (it stops at its
  // next check_task_cancelled()); the step keeps its copy of fn alive until then. So fn must
  // capture per-step data by value (tensor handles, shared pointers), and what it refers to by
  // reference must outlive wait_for_stragglers().
  void run(ReplicaFn fn, bool apply);
  // Blocks until no run of any step is executing (call before destroying what the replica
  // functions refer to).
  void wait_for_stragglers();

  // After run(): the RunState of the run that committed for local replica r.
  RunState* committed_state(int r) const;
  // True once a replica function called a collective and the replicas run as a gang.
  bool gang_schedule() const { return gang_; }
  void set_gang_schedule(bool gang) { gang_ = gang; }

  int64_t total_elements() const { return total_; }
  SyncStats stats() const;

  // Elements per update chunk, between these bounds: about four chunks per thread (a chunk task
  // costs about a microsecond of scheduling, as much as the update of ~500 elements), never so
  // large that a straggling chunk is costly to re-run or its scratch leaves the core's L2.
  static constexpr int64_t kMinChunk = 2048;
  static constexpr int64_t kMaxChunk = 32768;
  int64_t chunk_elements() const { return chunk_; }

  // Every worker must offer the same number of sum_after_step values in a step (a worker whose
  // replicas all had empty slices offers none, which the others cannot fill in). A step whose
  // gradients cross workers in float32 carries the check in that all-reduce instead of one of its
  // own: two more elements, each worker's count n and n², summed. This returns the common count
  // from those sums over `workers` workers; throws FailedPrecondition when the counts differ
  // (workers · Σn² = (Σn)² only when every n is the same); returns -1 when the sums are too
  // large to be exact in float32, and the step then checks with an integer all-reduce.
  static int64_t deferred_count_from_sums(double sum, double sum_of_squares, int workers);

  // Steps constructed afterwards write their update's results (weights and optimizer slots) with
  // non-temporal stores when those are more than `bytes` per step (default 16 MiB: more than the
  // cores' caches hold, so the stores would only evict); the bits are the same either way.
  static void set_streaming_threshold(size_t bytes);
  static size_t streaming_threshold();

 private:
  friend class ReplicaRun;
  struct Slot;
  struct Chunk {
    size_t var;
    int64_t offset;  // in the variable
    int64_t flat;    // in the concatenation of all variables
    int64_t n;
  };
  struct Scratch;
  class ReplicaPhase;
  class ChunkPhase;
  enum class ChunkMode { accumulate, sum, apply_from_sum, apply };

  Slot* acquire();
  void release(Slot* s);
  // The replica phase. With `update` (a step that applies an update on one worker, no gradient
  // norms): the same phase's second stage applies it (TaskPool::run(first, then)), and the
  // function returns true; false when it did not (the replicas ran as a gang, or no update).
  bool run_replicas(ReplicaFn fn, ChunkPhase* update = nullptr);
  // Waits until no run of an earlier step executes, then releases the previous step's slots.
  void retire_previous_step();
  // Between the replicas and the update: per-replica state committed in replica order, the
  // sum_after_step values applied, the update's buffers and step constants prepared.
  void end_replicas();
  // After the update: the spare buffers of backups that won, the buffers flipped.
  void finish_update();
  // The sums of sum_after_step across workers, then their updates. `carried`: the two count
  // elements the gradient all-reduce carried (see deferred_count_from_sums), or nullptr to check
  // the counts with an all-reduce of their own.
  void apply_deferred_sums(const float* carried = nullptr);
  // How many distinct sum_after_step values this worker's committed runs offer this step.
  size_t deferred_sum_count() const;
  // Overlap (one local replica, several workers): see ReplicaRun::overlaps_communication.
  struct Bucket {
    size_t first_var = 0, end_var = 0;  // variables [first_var, end_var)
    int64_t begin = 0, end = 0;         // their flat elements
  };
  void make_buckets();
  void bucket_ready(ReplicaRun& run, size_t bucket);
  void wait_for_buckets();
  void prepare_buffers();
  void run_chunks(ChunkMode mode);
  // What a chunk phase reads of the step's state, fixed when the phase starts.
  struct ChunkInputs {
    int parity = 0;
    bool with_accumulator = false;
    int accumulator = 0;  // the one read
  };
  void sum_chunk(const Chunk& c, const ChunkInputs& in, float* out) const;
  // The gradient of the only replica that has one for this chunk, when the sum is just that and
  // the update does not write it; else nullptr.
  const float* sole_gradient(const Chunk& c, const ChunkInputs& in) const;
  // The chunk's terms of the sum in their fixed order (the accumulator first, then the replicas
  // that have a gradient for it); returns how many there are, writing at most two to `terms`.
  int chunk_terms(const Chunk& c, const ChunkInputs& in, const float* terms[2]) const;
  // The gradient buffer of the only local replica that has gradients, when it has one for every
  // variable and nothing else is summed (no accumulator): then it is the local sum as it is.
  // Else nullptr.
  float* sole_replica_sum();
  // The local sum (sum_) and `extra` elements after it, summed across workers.
  void all_reduce_across_workers(int64_t extra = 0);
  static constexpr int64_t kCountSlots = 2;  // the carried deferred-sum count: n and n²
  // Allocates variable i's spare buffers (weights and slots), which take a winning backup run's
  // update, unless they exist; safe from concurrent commits.
  void allocate_spares(size_t i);
  // After an update: makes the spares of every variable a backup won a chunk of its next buffers.
  void publish_backup_updates();

  Strategy& strategy_;
  std::vector<Variable> vars_;
  std::vector<std::vector<Variable>> slots_;
  ElementwiseUpdate& update_;
  std::function<std::unique_ptr<RunState>()> make_state_;
  std::vector<Chunk> chunks_;
  int64_t total_ = 0;
  int num_local_;
  bool gang_ = false;

  std::mutex pool_mu_;
  std::vector<std::unique_ptr<Slot>> slots_all_;
  std::vector<Slot*> free_;
  // The committed runs per local replica, of this step (committed_[parity_]) and of the previous
  // one, whose slots are released once nothing reads them: a lingering run of the previous step
  // may still read that vector while this step fills the other.
  std::vector<Slot*> committed_[2];
  int parity_ = 0;
  // Replica phases (each holding its step's fn) kept until their runs can no longer execute.
  std::vector<std::pair<std::unique_ptr<ReplicaPhase>, uint64_t>> replica_phases_;
  std::unique_ptr<ChunkPhase> chunk_phases_[4];
  uint64_t step_first_phase_ = 0;  // TaskPool sequence before this step's first phase
  // Per variable, set before each update: the current and next data of the variable and its
  // slots, and where its next bfloat16 rounding goes (nullptr: not in use).
  std::vector<const float*> cur_w_;
  std::vector<float*> next_w_, next_r_;
  std::vector<std::vector<const float*>> cur_s_;
  std::vector<std::vector<float*>> next_s_;

  Tensor accumulator_[2];
  int acc_current_ = 0;
  bool acc_valid_ = false;
  std::vector<Bucket> buckets_;    // buckets_[0] holds the last variables
  std::vector<size_t> bucket_of_;  // variable -> bucket
  bool overlap_step_ = false;      // this step overlaps (set before the replica phase)
  std::unique_ptr<std::atomic<uint32_t>[]> bucket_claimed_;
  std::vector<char> bucket_filled_;  // guarded by bucket_mu_
  size_t buckets_enqueued_ = 0;      // guarded by bucket_mu_
  std::mutex bucket_mu_;
  std::condition_variable bucket_cv_;
  std::unique_ptr<BackgroundReducer> reducer_;
  bool overlap_accumulator_ = false;  // the accumulator joins the buckets this step
  Tensor summed_;                     // the all-reduced sum (several workers, or norms needed)
  // Where this update reads the summed gradient: summed_, or sole_replica_sum()'s buffer.
  float* sum_ = nullptr;
  std::vector<bfloat16> summed_bf16_;
  std::vector<std::unique_ptr<Scratch>> scratch_;  // per pool thread
  // Update chunks whose backup run won this update (written by commit, read after the phase),
  // and per variable the spare weights and slots such a run's result goes to.
  std::vector<char> won_by_backup_;
  std::vector<Tensor> spare_w_;
  std::vector<std::vector<Tensor>> spare_s_;
  std::mutex spare_mu_;
  size_t max_slots_ = 0;
  bool stream_next_ = false;  // see set_streaming_threshold()
  int64_t chunk_ = kMinChunk;
  // When the last replica of a two-stage step committed (end_replicas), for stats_.local_seconds.
  std::chrono::steady_clock::time_point replicas_ended_{};

  SyncStats stats_;
};

}  // namespace lockstep::distribute
