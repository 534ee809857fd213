#pragma once
// ReplicaRuns: every local replica's function (forward and backward on its element of the step,
// StepInput) run as a task of the strategy's TaskPool, each run into a slot of its own.
//
// A run writes its gradients and its RunState (the trainer's loss sums and metrics) into a
// private slot; the first run of each replica to finish commits it, and a run that lost to its
// backup (task_pool.h) gives its slot back. Per-replica state a run changed through its
// ReplicaContext (random streams, moving statistics) is written back once, in replica order,
// from the committed runs. A losing run may still execute after its step is over: the step's
// replica function and its input live here until the step retires (no run of it can execute),
// and a slot is reused only once no run of an earlier step can read it (retire_previous_step).
// The caller hands a step its input and function and keeps nothing alive for the runs.
//
// Collectives inside the replica function need every replica to run at once: a task that calls
// one throws CollectiveInTask, and from then on the replicas run as a gang, one thread each
// (Strategy::run_on_replicas), on the elements the step's input already gave them.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/shared_blocks.h"
#include "lockstep/autodiff/variable.h"
#include "lockstep/core/tensor.h"
#include "lockstep/distribute/replica_context.h"
#include "step_input.h"

namespace lockstep::distribute {

class Strategy;
class TaskPhase;
class ReplicaRuns;

// What a replica's run carries besides its gradients (the trainer's loss sums and metrics).
struct RunState {
  virtual ~RunState() = default;
};

// Takes the gradients a run reports before its backward pass is over (GradientReducer's buckets).
class GradientSink {
 public:
  virtual void gradient_ready(ReplicaRun& run, size_t variable) = 0;

 protected:
  ~GradientSink() = default;
};

// One run of one replica's function: private until it commits.
class ReplicaRun {
 public:
  int replica() const { return replica_; }
  // Buffers shaped like the step's variables: pass them to GradientTape::gradient as destinations
  // so the gradients are not copied. float32, but bfloat16 for a variable whose gradient arrives
  // in bfloat16 (Variable::gradient_dtype) when the step sums several local replicas: the update
  // reads half the bytes. Each such buffer lies in the first half of its float32 one.
  const std::vector<Tensor>& gradient_buffers() const;
  // Records this run's gradients, one per variable (undefined: none, counted as zeros); tensors
  // other than gradient_buffers() are copied in. Shapes must match the variables'; float32, or
  // bfloat16 (kept as bfloat16 where gradient_buffers() can hold it, else widened).
  void set_gradients(const std::vector<Tensor>& grads);
  // The RunState made by the step's factory (nullptr without one).
  RunState* state() const { return state_.get(); }
  // Overlap of the cross-worker sum with the backward pass (DDP's bucket hooks): when true, the
  // replica function reports each gradient as soon as it is final with gradient_ready()
  // (GradientTape::set_gradient_ready_callback), and buckets of finished gradients start crossing
  // workers while backward goes on.
  bool overlaps_communication() const { return overlap_; }
  void gradient_ready(size_t variable, const Tensor& gradient);

  // ---- What the reducer reads of a committed run.
  bool has_gradient(size_t variable) const { return defined_[variable] != 0; }
  bool has_any_gradient() const;
  bool has_every_gradient() const;
  // The gradients end to end (ChunkLayout), and room for the reducer's extra elements after them:
  // variable v's gradient at flat_gradients() + its layout offset when it is float32
  // (gradient_dtype), else bfloat16 from that address on (bf16_gradient).
  float* flat_gradients() const { return flat_.data<float>(); }
  DType gradient_dtype(size_t variable) const { return stored_[variable]; }
  const bfloat16* bf16_gradient(size_t variable) const {
    return bf16_views_[variable].data<bfloat16>();
  }
  // Every gradient this run has is float32: flat_gradients() is the whole sum's layout.
  bool float32_gradients() const;
  // Per-run counters the gradient sink keeps (its buckets' reported gradients), zeroed per run.
  std::vector<int>& sink_counts() { return sink_counts_; }

 private:
  friend class ReplicaRuns;
  friend class ReplicaContext;
  friend class DeferredSums;
  void reset(int replica, bool overlap);
  void commit();
  void* find_local(const void* shared) const;
  void add_local(const void* shared, std::shared_ptr<void> copy, std::function<void()> commit);
  void add_deferred_sum(const void* key, const Tensor& value,
                        std::function<void(const Tensor&)> apply) {
    deferred_.push_back({key, value, std::move(apply)});
  }

  int replica_ = 0;
  bool overlap_ = false;
  GradientSink* sink_ = nullptr;
  std::vector<int> sink_counts_;
  Tensor flat_;
  std::vector<Tensor> views_;
  // Where bfloat16 gradients may be kept (ReplicaRuns::bf16_gradients_): a bfloat16 view at the
  // start of each float32 view; empty otherwise. dest_: what gradient_buffers() hands out, by the
  // variables' gradient dtypes at the time.
  const std::vector<Variable>* vars_ = nullptr;
  std::vector<Tensor> bf16_views_;
  mutable std::vector<Tensor> dest_;
  std::vector<DType> stored_;  // per variable, as set_gradients kept it
  std::vector<char> defined_;
  std::unique_ptr<RunState> state_;
  struct Local {
    const void* shared;
    std::shared_ptr<void> copy;
    std::function<void()> commit;
  };
  std::vector<Local> locals_;
  struct Deferred {
    const void* key;
    Tensor value;
    std::function<void(const Tensor&)> apply;
  };
  std::vector<Deferred> deferred_;
};

// One run of a replica's step: its context, its private slot, and its element of the step.
using ReplicaFn = std::function<void(ReplicaContext&, ReplicaRun&, const Element& input)>;

class ReplicaRuns {
 public:
  struct Options {
    // Extra float32 elements after each run's gradients (ReplicaRun::flat_gradients).
    int64_t extra_elements = 0;
    // Makes each slot's RunState (none when empty).
    std::function<std::unique_ptr<RunState>()> make_state;
    // Receives the runs' early gradients when a step overlaps; `sink_counters` per run.
    GradientSink* sink = nullptr;
    size_t sink_counters = 0;
    // Called on the thread that committed the last replica of a phase chained to the next
    // (run_as_tasks with `then`): what the caller would do between the two phases.
    std::function<void()> on_replicas_done;
  };
  ReplicaRuns(Strategy& strategy, const std::vector<Variable>& vars, Options options);
  ~ReplicaRuns();
  // Whether runs constructed afterwards hand out bfloat16 gradient buffers where a variable's
  // gradient arrives in bfloat16 (ReplicaRun::gradient_buffers; default on). Off, such gradients
  // are widened into float32 buffers: the same sums, twice the bytes. Process-wide; for tests
  // and measurements.
  static void set_bfloat16_gradient_buffers(bool on);
  static bool bfloat16_gradient_buffers();
  ReplicaRuns(const ReplicaRuns&) = delete;
  ReplicaRuns& operator=(const ReplicaRuns&) = delete;

  // A new step of `fn` on `input`, both kept until the step retires: a run that lost to its
  // backup may still call fn and read its element after the step. The committed runs of the
  // previous step stay readable until retire_previous_step().
  void begin_step(StepInput input, ReplicaFn fn);
  // Every local replica's run of the step as tasks; with `then`, that phase chained after them
  // (on_replicas_done between the two). Returns false, with nothing committed, when a replica
  // called a collective: the replicas run as a gang from then on (run_as_gang). Without `then`,
  // the committed runs' per-replica state is written back before it returns.
  bool run_as_tasks(bool overlap, TaskPhase* then = nullptr);
  // Every local replica at once, one thread each, with the local communicator; then the
  // committed runs' per-replica state written back.
  void run_as_gang();
  bool gang() const { return gang_; }
  // Writes back the per-replica state of this step's committed runs, in replica order.
  void commit_replica_state();
  // Blocks until no run of an earlier step executes, then gives the previous step's slots back
  // and releases its function and input.
  void retire_previous_step();
  // Blocks until no run of an earlier step executes (before writing what such a run reads).
  void wait_for_earlier_steps();
  // Blocks until no run of any step executes, then releases every step's function and input
  // (the committed runs stay readable).
  void settle();

  // This step's committed run per local replica (after the replicas' phase).
  const std::vector<ReplicaRun*>& committed() const { return committed_[parity_]; }
  RunState* committed_state(int replica) const;
  int num_local() const { return num_local_; }
  int64_t num_elements() const { return total_; }

 private:
  class Phase;
  ReplicaRun* acquire();
  void release(ReplicaRun* run);
  // An idle thread's help with the blocks a run under way posted; whether it ran any.
  bool help_runs();

  Strategy& strategy_;
  std::vector<Variable> vars_;
  // bfloat16 gradient buffers (ReplicaRun::gradient_buffers) only where several local replicas are
  // summed by the update itself: one local replica's buffer is the all-reduce's float32 input.
  bool bf16_gradients_ = false;
  std::vector<Shape> shapes_;
  int64_t total_ = 0;
  Options options_;
  int num_local_;
  // Per pool thread: where the run it executes posts blocks for the others.
  std::unique_ptr<BlockBoard[]> boards_;
  size_t num_boards_ = 0;
  bool gang_ = false;

  std::mutex slots_mu_;
  std::vector<std::unique_ptr<ReplicaRun>> slots_;
  std::vector<ReplicaRun*> free_;
  // The committed runs per local replica, of this step (committed_[parity_]) and of the previous
  // one, whose slots are given back once nothing reads them: a lingering run of the previous step
  // may still read that vector while this step fills the other.
  std::vector<ReplicaRun*> committed_[2];
  int parity_ = 0;
  // Each step's phase, holding its function and input; kept until its runs can no longer
  // execute and the pool no longer refers to it.
  std::vector<std::unique_ptr<Phase>> phases_;
  Phase* current_ = nullptr;
  Phase* previous_ = nullptr;
  uint64_t step_first_phase_ = 0;  // TaskPool sequence before this step's first phase
};

}  // namespace lockstep::distribute
