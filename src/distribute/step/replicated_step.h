#pragma once
// ReplicatedStep: one synchronous training step over every replica in sync, run as tasks of the
// strategy's TaskPool, in phases:
//
//   1. replicas — every local replica's function, forward and backward on its element of the
//                 step's input (ReplicaRuns, StepInput);
//   2. reduce   — the gradients summed in replica order, then across workers (GradientReducer);
//   3. update   — the optimizer's elementwise rule on the sum, into the variables' next buffers,
//                 then the flip (BufferedUpdate); or in place, when no replica run was backed up
//                 (none can still be reading the weights) and BufferedUpdate::in_place_mode()
//                 allows it on this machine.
//
// A step that only accumulates (gradient accumulation) stops after adding its sum to the
// accumulator; nothing crosses workers then (DDP's no_sync). The common step (one worker, no
// gradient norms) runs the update chained to the replicas' phase, without a pause between them.
//
// Nothing depends on which thread ran what: sums run in a fixed order over replicas and chunks,
// so for a given number of replicas the weights are bit-identical on any number of threads.
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "buffered_update.h"
#include "chunk_layout.h"
#include "gradient_reducer.h"
#include "lockstep/autodiff/variable.h"
#include "lockstep/distribute/elementwise_update.h"
#include "lockstep/distribute/sync_stats.h"
#include "replica_runs.h"
#include "step_input.h"

namespace lockstep::distribute {

class Strategy;

class ReplicatedStep {
 public:
  // `vars`: the trainable variables (float32), in the order of the gradients; `update` is bound
  // to them and must outlive the step; `make_state` makes each run slot's RunState.
  ReplicatedStep(Strategy& strategy, std::vector<Variable> vars, ElementwiseUpdate& update,
                 std::function<std::unique_ptr<RunState>()> make_state = {});
  ~ReplicatedStep();
  ReplicatedStep(const ReplicatedStep&) = delete;
  ReplicatedStep& operator=(const ReplicatedStep&) = delete;

  // One step: fn on every local replica's element of `input`, then the gradients summed over all
  // replicas in sync and applied (apply = true) or accumulated for the next applying step
  // (apply = false).
  //
  // The step owns `input` and `fn` until no run of it can execute: a run that lost to its backup
  // may still be executing fn after run() returns (it stops at its next check_task_cancelled()),
  // and reads the element the step gave it. A pulled input's function is called only during
  // run(). What fn refers to by reference must outlive the step's runs: until the next run(),
  // settle() or the step's destruction. When run() throws, nothing of any step is running.
  void run(StepInput input, ReplicaFn fn, bool apply);
  // Blocks until no run of any step is executing, then releases the steps' functions and
  // inputs: what they referred to is the caller's again.
  void settle();

  // After run(): the RunState of the run that committed for local replica r.
  RunState* committed_state(int r) const { return runs_.committed_state(r); }
  SyncStats stats() const;

 private:
  // The replicas' phase, with `then` chained to it when given; false when it was not (the
  // replicas ran as a gang).
  bool run_replicas(bool overlap, TaskPhase* then);
  // Whether an applying step's cross-worker sum overlaps backward: when one local replica feeds
  // it (several local replicas sum after their phase; see docs/distributed.md).
  bool overlaps_backward() const;
  // Before the replicas' phase of a step whose cross-worker sum overlaps backward.
  void begin_overlap();
  // Between the replicas and a chained update: per-replica state committed, the deferred sums
  // applied, the update begun.
  void end_replicas();
  // A step that only accumulates: the deferred sums applied, the replicas' sum added to the
  // accumulator.
  void accumulate();
  // The deferred sums applied and the update begun, for an update that sums the replicas'
  // gradients chunk by chunk; then that update's phase, run after the replicas'.
  void begin_summed_update();
  void update_summing();
  // The summed gradient of an update whose sum is one buffer (several workers, or gradient
  // norms); applies the deferred sums, carrying their count in the all-reduce when it can.
  float* reduce(bool overlapped);
  // The update from that one buffer, with the gradient norms when the rule wants them.
  void update_from(float* sum, bool norms);
  void end_update();
  void count_step(std::chrono::steady_clock::time_point since);
  // Whether this step's update runs in place (BufferedUpdate::set_in_place), given whether a task
  // of its replicas' phase was backed up.
  bool update_in_place() const;

  Strategy& strategy_;
  ChunkLayout layout_;
  GradientReducer reducer_;
  ReplicaRuns runs_;
  BufferedUpdate update_;
  bool workers_;
  std::chrono::steady_clock::time_point replicas_ended_{};
  // The replicas' phase of the step under way had a task backed up (or ran as a gang: false).
  bool replicas_backed_up_ = false;
  SyncStats stats_;
};

}  // namespace lockstep::distribute
