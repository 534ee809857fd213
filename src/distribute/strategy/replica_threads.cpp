#include "replica_threads.h"

#include <omp.h>

#include <string>

#include "core/cpu_affinity.h"
#include "lockstep/core/cpu_cores.h"
#include "lockstep/core/error.h"

namespace lockstep::distribute {

ReplicaThreads::ReplicaThreads(std::vector<std::vector<int>> replica_cores)
    : errors_(replica_cores.size()) {
  if (replica_cores.empty()) throw InvalidArgument("ReplicaThreads: needs at least one replica.");
  threads_.reserve(replica_cores.size());
  for (size_t r = 0; r < replica_cores.size(); ++r) {
    threads_.emplace_back(&ReplicaThreads::worker, this, static_cast<int>(r), replica_cores[r]);
  }
}

ReplicaThreads::~ReplicaThreads() {
  stopping_ = true;
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplicaThreads::worker(int replica, std::vector<int> cores) {
  os::adopt_thread_start_mask();
  pin_current_thread(cores);
  // Each replica owns one core: oneDNN's OpenMP regions started from this thread stay on it, and
  // no idle OpenMP team spins on the other cores.
  omp_set_num_threads(1);
  uint32_t seen = 0;
  for (;;) {
    generation_.wait(seen, std::memory_order_acquire);
    uint32_t now = generation_.load(std::memory_order_acquire);
    if (now == seen) continue;
    seen = now;
    if (stopping_) return;
    try {
      (*task_)(replica);
    } catch (...) {
      errors_[static_cast<size_t>(replica)] = std::current_exception();
      bool first = !failed_.exchange(true);
      if (first) first_failed_ = replica;
      if (first && on_failure_ && *on_failure_) {
        std::string what = "replica " + std::to_string(replica) + " failed";
        try {
          throw;
        } catch (const std::exception& e) {
          what += ": " + std::string(e.what());
        } catch (...) {
        }
        (*on_failure_)(what);
      }
    }
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      finished_.store(seen, std::memory_order_release);
      finished_.notify_one();
    }
  }
}

void ReplicaThreads::run(const std::function<void(int)>& fn,
                         const std::function<void(const std::string&)>& on_failure) {
  task_ = &fn;
  on_failure_ = &on_failure;
  failed_.store(false, std::memory_order_relaxed);
  for (auto& e : errors_) e = nullptr;
  remaining_.store(size(), std::memory_order_relaxed);
  uint32_t gen = generation_.fetch_add(1, std::memory_order_acq_rel) + 1;
  generation_.notify_all();
  for (uint32_t f = finished_.load(std::memory_order_acquire); f != gen;
       f = finished_.load(std::memory_order_acquire)) {
    finished_.wait(f, std::memory_order_acquire);
  }
  task_ = nullptr;
  on_failure_ = nullptr;
  // The first failure is the cause; the others are usually replicas released from a collective
  // by the abort it triggered.
  if (failed_.load(std::memory_order_acquire))
    std::rethrow_exception(errors_[static_cast<size_t>(first_failed_)]);
}

}  // namespace lockstep::distribute
