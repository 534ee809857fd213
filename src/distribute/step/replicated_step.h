#pragma once
// ReplicatedStep: one synchronous training step over every replica in sync, run as tasks of the
// strategy's TaskPool, in phases:
//
//   1. replicas — every local replica's function, forward and backward (ReplicaRuns);
//   2. reduce   — the gradients summed in replica order, then across workers (GradientReducer);
//   3. update   — the optimizer's elementwise rule on the sum, into the variables' next buffers,
//                 then the flip (BufferedUpdate).
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

  // One step: fn on every local replica, then the gradients summed over all replicas in sync and
  // applied (apply = true) or accumulated for the next applying step (apply = false).
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
  RunState* committed_state(int r) const { return runs_.committed_state(r); }
  SyncStats stats() const;

 private:
  // The replicas' phase, with `then` chained to it when given; false when it was not (the
  // replicas ran as a gang).
  bool run_replicas(const ReplicaFn& fn, bool overlap, TaskPhase* then);
  // Between the replicas and a chained update: per-replica state committed, the deferred sums
  // applied, the update begun.
  void end_replicas();
  // The summed gradient of an update whose sum is one buffer (several workers, or gradient
  // norms); applies the deferred sums, carrying their count in the all-reduce when it can.
  float* reduce(bool overlapped);
  void end_update();

  Strategy& strategy_;
  ChunkLayout layout_;
  GradientReducer reducer_;
  ReplicaRuns runs_;
  BufferedUpdate update_;
  bool workers_;
  std::chrono::steady_clock::time_point replicas_ended_{};
  SyncStats stats_;
};

}  // namespace lockstep::distribute
