#pragma once
// CommHook: how a float32 gradient sum crosses workers — DDP's communication hooks. The default
// sends float32; compression (bfloat16 on the wire, CommunicationOptions::gradient_dtype) is
// another hook, not a branch in the reducer. A hook is called once per all-reduce or per bucket,
// never per element from the reducer.
#include <cstddef>
#include <memory>

#include "lockstep/core/dtype.h"

namespace lockstep::distribute {

class BackgroundReducer;
class Communicator;

class CommHook {
 public:
  virtual ~CommHook() = default;
  // The dtype a gradient element crosses workers in.
  virtual DType wire_dtype() const = 0;
  // Sums data[0, n) across workers in place, now.
  virtual void all_reduce(Communicator& cross, float* data, size_t n) = 0;
  // Room for buckets of a flat range of n elements (before the first enqueue of a step).
  virtual void reserve(size_t /*n*/) {}
  // Starts summing data[begin, end) on `reducer` (the bucket belongs to it until wait()).
  virtual void enqueue(BackgroundReducer& reducer, float* data, size_t begin, size_t end) = 0;
  // After the reducer's wait(): makes data[0, n) the float32 sums of the enqueued buckets.
  virtual void finish(float* /*data*/, size_t /*n*/) {}
};

// The hook for CommunicationOptions::gradient_dtype (float32 or bfloat16).
std::unique_ptr<CommHook> make_comm_hook(DType gradient_dtype);

}  // namespace lockstep::distribute
