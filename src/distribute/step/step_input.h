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
  // Pulled: the first run of replica r in the step calls pull(r), on its own thread.
  explicit StepInput(Pull pull);

  // Called by the step once, before any run, with its number of local replicas.
  void begin(int num_replicas);
  // Replica r's element of this step. The first call for r pulls it, after a cancellation check
  // (a run whose twin already committed stops there); later calls return the same element or
  // rethrow the same error. A pull cancelled (TaskCancelled) is not kept. The element stays valid
  // as long as this input.
  const Element& get(int replica);
  // Ends the pulls: once it returns no pull is executing, a get() that would pull throws
  // TaskCancelled, and the pull function (with what it refers to) is released. The elements
  // pulled so far stay readable.
  void close();

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
  std::unique_ptr<Slot[]> slots_;
  int num_replicas_ = 0;
};

}  // namespace lockstep::distribute
