#pragma once
// ReplicaThreads: one long-lived thread per local replica, each pinned to its cores, each running
// single-threaded kernels. `run` hands a function to every thread at once and blocks the caller
// until all have finished: the caller sleeps (futex) rather than spins, because a spinning host
// thread on a 2-core machine takes a core away from a replica (docs/machine.md).
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace lockstep::distribute {

class ReplicaThreads {
 public:
  // One thread per entry of `replica_cores`; entry r lists the OS cpu ids replica r is pinned to
  // (empty: not pinned). Each thread limits OpenMP (oneDNN's runtime here) to one thread.
  explicit ReplicaThreads(std::vector<std::vector<int>> replica_cores);
  ~ReplicaThreads();
  ReplicaThreads(const ReplicaThreads&) = delete;
  ReplicaThreads& operator=(const ReplicaThreads&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }

  // Runs fn(r) on replica thread r for every r, concurrently, and returns when all are done.
  // If some replicas throw, `on_failure` (if set) is called from the first failing thread (so the
  // strategy can break collectives others may be waiting in), and that first exception is
  // rethrown here. Not reentrant: call from one host thread at a time.
  void run(const std::function<void(int)>& fn,
           const std::function<void(const std::string&)>& on_failure = {});

 private:
  void worker(int replica, std::vector<int> cores);

  std::vector<std::thread> threads_;
  const std::function<void(int)>* task_ = nullptr;
  const std::function<void(const std::string&)>* on_failure_ = nullptr;
  std::vector<std::exception_ptr> errors_;
  std::atomic<bool> failed_{false};
  int first_failed_ = 0;  // written by the first failing replica, read after all finished
  std::atomic<uint32_t> generation_{0};  // bumped to start a task (and to stop)
  std::atomic<int> remaining_{0};
  std::atomic<uint32_t> finished_{0};  // set to the generation when the last replica finishes
  bool stopping_ = false;
};

}  // namespace lockstep::distribute
