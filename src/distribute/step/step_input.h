#pragma once
// StepInput: what each local replica trains on in one step — elements the host fetched, or a
// function each replica's run calls on its own thread to pull its element (per-replica
// pipelines, whose input work then runs beside the other replicas').
//
// A replica's task may run more than once in a step: a backup run for a straggler (task_pool.h),
// or a rerun as a gang after a replica function called a collective (replica_runs.h). Every run of
// a step gets what the first pull got: the same element, or the same error rethrown. A backup
// never pulls the element after a failed pull: it could then commit, and the error would be lost
// with the skipped batch. The step (ReplicaRuns) owns its input until no run of the step can
// execute, so a run that lost to its backup may read its element after the step is over; the pull
// function is called only while the step runs (close()).
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "lockstep/data/element.h"
#include "lockstep/distribute/per_replica.h"

namespace lockstep::distribute {

class StepInput {
 public:
  // Local replica r's element, pulled from its own pipeline.
  using Pull = std::function<Element(int local_replica)>;

  // No input: every replica gets an empty element.
  StepInput() = default;
  // Fetched by the host: replica r gets given[r].
  explicit StepInput(PerReplica<Element> given);
  // Pulls ahead one replica's element of a later step, on a thread with nothing else to do in this
  // one, that replica's first if it can; false when there is nothing to stage
  // (DistributedDataset::Iterator::stage_next).
  using Stage = std::function<bool(int replica)>;

  // Pulled: the first run of replica r in the step calls pull(r), on its own thread; and
  // stage(), when given, on threads the step leaves idle (stage()).
  explicit StepInput(Pull pull, Stage stage = nullptr);

  // Called by the step once, before any run, with its number of local replicas.
  void begin(int num_replicas);
  // Replica r's element of this step. The first call for r pulls it, after a cancellation check
  // (a run whose twin already committed stops there); later calls return the same element or
  // rethrow the same error. A pull cancelled (TaskCancelled) is not kept. The element stays valid
  // as long as this input.
  const Element& get(int replica);
  // Work for a thread the step leaves idle: the stage function once, if there is one and the
  // input is not closed, preferring `replica` (-1: none). Whether it staged something (false:
  // nothing left to stage).
  bool stage(int replica);
  // Ends the pulls: once it returns no pull nor stage is executing, a get() that would pull
  // throws TaskCancelled, and the pull and stage functions (with what they refer to) are released.
  // The elements pulled so far stay readable. A staging under way holds it until that ends: it
  // watches for the end for up to `spin` before sleeping on it: the step passes
  // TaskPool::spin_before_sleep where a core is spare, and on a busy machine still about a
  // staging's length (ReplicaRuns), as a sleeper there waits a scheduler slice to run again.
  void close(std::chrono::microseconds spin = std::chrono::microseconds(0));

 private:
  struct Slot {
    std::mutex mu;
    bool pulled = false;
    bool closed = false;
    Element element;
    std::exception_ptr error;
  };
  const Element& pull(int replica);

  std::vector<Element> given_;
  Pull pull_;
  struct Stager {
    std::mutex mu;  // held while staging, and by close()
    Stage fn;       // null once closed
  };
  std::unique_ptr<Stager> stager_;
  std::unique_ptr<Slot[]> slots_;
  int num_replicas_ = 0;
};

}  // namespace lockstep::distribute
