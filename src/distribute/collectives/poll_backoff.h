#pragma once
// Waiting for an MPI request without holding a core someone else needs.
//
// Open MPI moves a request forward only inside MPI calls (between processes of one host there is
// nothing to block on: the shared-memory transport is polled), so a wait is a loop of MPI_Test.
// Spinning in that loop is right while the peers are about to arrive or data is moving (every poll
// moves it on); it is ruinous when the machine is oversubscribed (another process, a co-runner,
// more ranks than cores): the spinning rank takes the core from the very peer it waits for, and the
// scheduler charges the trainer for the spin. So the loop spins only for a budget — about the time
// the collective itself takes once every rank is there (at least kSpin; for large messages their
// size at kSpinBandwidth, a low estimate of what a host's memory or a network moves, so that a
// transfer under way is not slowed by sleeps) — and then sleeps between polls, each sleep an eighth
// of the time waited so far (at least kMinSleep, at most kMaxSleep): a wait of t ends at most about
// t/8 late, and a long wait polls a few thousand times a second instead of millions.
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace lockstep::distribute::detail {

class PollBackoff {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::microseconds kSpin{100};
  static constexpr double kSpinBandwidth = 2e9;  // bytes per second
  static constexpr std::chrono::milliseconds kMaxSpin{20};
  static constexpr std::chrono::microseconds kMinSleep{20};
  static constexpr std::chrono::microseconds kMaxSleep{1000};

  explicit PollBackoff(std::chrono::nanoseconds spin = kSpin);
  // The spin budget for a collective moving `bytes` per rank: kSpin, or bytes / kSpinBandwidth
  // when longer, at most kMaxSpin.
  static std::chrono::nanoseconds spin_for_bytes(size_t bytes);
  // Restores the thread's timer slack if the sleeps lowered it.
  ~PollBackoff();
  PollBackoff(const PollBackoff&) = delete;
  PollBackoff& operator=(const PollBackoff&) = delete;

  // Called after every poll that found nothing. Returns true when the caller should also do its
  // slower checks (answer diagnosis queries, compare against its deadline): every 256 polls
  // while spinning, after every sleep otherwise.
  bool pause();
  double waited_seconds() const;
  Clock::time_point start() const { return start_; }

 private:
  Clock::time_point start_;
  std::chrono::nanoseconds spin_;
  uint32_t polls_ = 0;
  long saved_timer_slack_ = -1;  // the thread's timer slack before the first sleep, or -1
};

}  // namespace lockstep::distribute::detail
