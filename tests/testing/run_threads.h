#pragma once
// Runs fn(0), ..., fn(n - 1) on n threads at once (ranks of a shared-memory group, replicas) and
// rethrows the first exception, by index, in the caller after all have finished.
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace lockstep::testing {

inline void run_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace lockstep::testing
