#pragma once
// BackgroundReducer: all-reduces buffers on a communication thread of its own, in the order they
// were enqueued, so that the caller can go on computing (the gradients of earlier layers) while
// earlier buckets cross workers — the background thread of Horovod and of DDP's process groups.
//
//   BackgroundReducer reducer(cross_worker_comm);
//   reducer.enqueue(bucket_a, n_a, DType::float32, ReduceOp::SUM);   // returns at once
//   ... compute the next gradients ...
//   reducer.enqueue(bucket_b, n_b, DType::float32, ReduceOp::SUM);
//   reducer.wait();   // both buckets summed over every rank; rethrows a failure
//
// Why a thread: MPI moves a non-blocking collective forward only inside MPI calls, so a request
// started before a long matmul would sit still until the matmul ends. The thread makes the calls.
// It sleeps on a condition variable while the queue is empty and polls (MPI_Test + sched_yield,
// see mpi_communicator.cpp) only while a bucket is in flight.
//
// Rules: every rank enqueues the same buffers in the same order (they are collectives); a buffer
// belongs to the reducer from enqueue() until wait() returns; the communicator must not be used by
// anyone else in between. After a failure (a timeout, a lost rank) the remaining buckets are
// dropped and wait() rethrows the error, as the blocking collective would have thrown it.
// Results are identical to calling comm.all_reduce on each buffer in the same order.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "lockstep/distribute/collective.h"

namespace lockstep::distribute {

class BackgroundReducer {
 public:
  // The thread may run on any core of the process (not the caller's pinned core); it is started
  // here and joined by the destructor.
  explicit BackgroundReducer(std::shared_ptr<Communicator> comm);
  ~BackgroundReducer();
  BackgroundReducer(const BackgroundReducer&) = delete;
  BackgroundReducer& operator=(const BackgroundReducer&) = delete;

  void enqueue(void* buf, size_t count, DType dtype, ReduceOp op);
  // Queues Communicator::all_reduce_compressed (bfloat16 on the wire) instead.
  void enqueue_compressed(bfloat16* buf, size_t count);
  // Returns when every enqueued all-reduce is done; rethrows the first failure (then again on every
  // later call: the communicator is broken).
  void wait();
  // All-reduces completed since construction.
  uint64_t completed() const;

 private:
  struct Job {
    void* buf;
    size_t count;
    DType dtype;
    ReduceOp op;
    bool compressed;
  };
  void push(const Job& job);
  void loop();

  std::shared_ptr<Communicator> comm_;
  mutable std::mutex mutex_;
  std::condition_variable work_;  // jobs queued or stopping
  std::condition_variable done_;  // the queue drained
  std::deque<Job> jobs_;
  bool busy_ = false;  // the thread is inside a collective
  bool stopping_ = false;
  uint64_t completed_ = 0;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace lockstep::distribute
