#pragma once
// DeferredSums: the values replicas offered with ReplicaContext::sum_after_step (a normalization
// layer's moving statistics), summed over this worker's committed runs in replica order, then
// across workers, then applied once, on the thread that runs the step.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace lockstep::distribute {

class Communicator;
class ReplicaRun;

class DeferredSums {
 public:
  // Every worker must offer the same number of values in a step (a worker whose replicas all had
  // empty slices offers none, which the others cannot fill in). A step whose gradients cross
  // workers in float32 carries the check in that all-reduce instead of one of its own: two more
  // elements, each worker's count n and n², summed. This returns the common count from those sums
  // over `workers` workers; throws FailedPrecondition when the counts differ
  // (workers · Σn² = (Σn)² only when every n is the same); returns -1 when the sums are too large
  // to be exact in float32, and the count is then checked with an integer all-reduce.
  static int64_t count_from_sums(double sum, double sum_of_squares, int workers);
  static constexpr int64_t kCountElements = 2;  // the carried count: n and n²

  // How many distinct values this worker's committed runs offer.
  static size_t count(const std::vector<ReplicaRun*>& runs);
  // Sums and applies them. `carried`: the two count elements the gradient all-reduce carried, or
  // nullptr to check the counts with an all-reduce of their own. `cross`: nullptr with one worker.
  static void apply(const std::vector<ReplicaRun*>& runs, Communicator* cross,
                    const float* carried = nullptr);
};

}  // namespace lockstep::distribute
