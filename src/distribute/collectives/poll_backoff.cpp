#include "poll_backoff.h"

#include <sys/prctl.h>

#include <algorithm>
#include <thread>

namespace lockstep::distribute::detail {
namespace {

// Linux delays a sleeping thread's wake-up by up to its timer slack (50 us by default) to batch
// timer interrupts; for sleeps of 20 us that would triple them. 5 us keeps the batching for
// everything else the thread does after the wait (the slack is restored).
constexpr unsigned long kWaitTimerSlackNs = 5000;

// As os::cpu_relax (core/futex.h).
void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("isb" ::: "memory");
#endif
}

}  // namespace

PollBackoff::PollBackoff(std::chrono::nanoseconds spin) : start_(Clock::now()), spin_(spin) {}

std::chrono::nanoseconds PollBackoff::spin_for_bytes(size_t bytes) {
  const auto transfer = std::chrono::nanoseconds(
      static_cast<int64_t>(static_cast<double>(bytes) / kSpinBandwidth * 1e9));
  return std::clamp<std::chrono::nanoseconds>(transfer, kSpin, kMaxSpin);
}

PollBackoff::~PollBackoff() {
  if (saved_timer_slack_ >= 0) {
    prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(saved_timer_slack_), 0, 0, 0);
  }
}

double PollBackoff::waited_seconds() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

bool PollBackoff::pause() {
  ++polls_;
  const Clock::duration waited = Clock::now() - start_;
  if (waited < spin_) {
    cpu_relax();
    return (polls_ & 255) == 0;
  }
  if (saved_timer_slack_ < 0) {
    const int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (slack >= 0) {
      saved_timer_slack_ = slack;
      prctl(PR_SET_TIMERSLACK, kWaitTimerSlackNs, 0, 0, 0);
    }
  }
  const Clock::duration sleep = std::clamp<Clock::duration>(waited / 8, kMinSleep, kMaxSleep);
  std::this_thread::sleep_for(sleep);
  return true;
}

}  // namespace lockstep::distribute::detail
