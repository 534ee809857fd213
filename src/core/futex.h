#pragma once
// Waiting on a 32-bit word without spinning: Linux futexes. std::atomic::wait has no timed form,
// and the step's waits need one (a backup task is started when a straggler has not finished by a
// deadline), and ranks of one host wait on words in a shared segment. Internal to the library
// (core); used by the distribute layer.
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace lockstep::os {

// A spin-wait hint. aarch64: ISB, not YIELD — YIELD is a no-op on the cores without SMT
// (Neoverse, Graviton), while ISB stalls for tens of cycles, closer to x86's PAUSE.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("isb" ::: "memory");
#endif
}

// Spins until done() returns true or `limit` has passed (the clock read every 64 rounds); whether
// done() did. The step's waits spin so before a futex sleep, where a core is spare.
template <typename Done>
bool spin_until(std::chrono::nanoseconds limit, Done done) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (int i = 0;; ++i) {
    cpu_relax();
    if (done()) return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) return false;
  }
}

// Sleeps while *word == expected, at most `relative` (nullptr: no limit). Returns at once when
// the word already differs; may return spuriously, so callers re-check their condition.
inline void futex_wait(std::atomic<uint32_t>* word, uint32_t expected,
                       const timespec* relative = nullptr) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, relative,
          nullptr, 0);
}

inline void futex_wait_for(std::atomic<uint32_t>* word, uint32_t expected,
                           std::chrono::nanoseconds limit) {
  if (limit.count() <= 0) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(limit.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(limit.count() % 1000000000);
  futex_wait(word, expected, &ts);
}

inline void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

// The same on a word in memory shared between processes (a MAP_SHARED mapping): the kernel keys
// these by the physical page, which costs a little more than the private form.
inline void futex_wait_shared_for(std::atomic<uint32_t>* word, uint32_t expected,
                                  std::chrono::nanoseconds limit) {
  if (limit.count() <= 0) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(limit.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(limit.count() % 1000000000);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void futex_wake_all_shared(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace lockstep::os
