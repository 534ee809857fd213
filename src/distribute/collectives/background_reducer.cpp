#include "lockstep/distribute/background_reducer.h"

#include "core/cpu_affinity.h"
#include "lockstep/core/check.h"
#include "lockstep/core/cpu_cores.h"
#include "lockstep/core/error.h"
#include "lockstep/core/profiler.h"

namespace lockstep::distribute {

BackgroundReducer::BackgroundReducer(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {
  LOCKSTEP_CHECK(comm_, "BackgroundReducer: the communicator is null");
  thread_ = std::thread([this] { loop(); });
}

BackgroundReducer::~BackgroundReducer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_.notify_one();
  thread_.join();
}

void BackgroundReducer::enqueue(void* buf, size_t count, DType dtype, ReduceOp op) {
  push({buf, count, dtype, op, false});
}

void BackgroundReducer::enqueue_compressed(bfloat16* buf, size_t count) {
  push({buf, count, DType::bfloat16, ReduceOp::SUM, true});
}

void BackgroundReducer::push(const Job& job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    jobs_.push_back(job);
  }
  work_.notify_one();
}

void BackgroundReducer::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return (jobs_.empty() && !busy_) || error_; });
  if (error_) std::rethrow_exception(error_);
}

uint64_t BackgroundReducer::completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

void BackgroundReducer::loop() {
  // Started from a thread that may be pinned to one core: without this it would inherit that
  // core and compete with the very computation it overlaps.
  use_process_cores();
  os::adopt_thread_start_mask();
  profiler::set_thread_label("communication");
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    Job job = jobs_.front();
    jobs_.pop_front();
    busy_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      profiler::ScopedSpan trace(profiler::Phase::all_reduce);
      if (job.compressed) {
        comm_->all_reduce_compressed(static_cast<bfloat16*>(job.buf), job.count);
      } else {
        comm_->all_reduce(job.buf, job.count, job.dtype, job.op);
      }
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    busy_ = false;
    if (error) {
      error_ = error;
      jobs_.clear();  // the communicator is broken: later buckets could never complete
    } else {
      ++completed_;
    }
    if (jobs_.empty()) done_.notify_all();
  }
}

}  // namespace lockstep::distribute
