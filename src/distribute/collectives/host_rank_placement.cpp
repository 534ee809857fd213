#include "host_rank_placement.h"

#include "core/cpu_affinity.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <new>

namespace lockstep::distribute::detail {

using Clock = std::chrono::steady_clock;

static_assert(sizeof(HostRankPlacement::Seat) <= HostRankPlacement::kSeatBytes);
static_assert(std::atomic<int32_t>::is_always_lock_free);

HostRankPlacement::HostRankPlacement(void* seats, int rank, int size, int cpus)
    : seats_(static_cast<std::byte*>(seats)),
      rank_(rank),
      size_(size),
      enabled_(size > 1 && size <= cpus),
      fds_(static_cast<size_t>(size), -1),
      fd_tids_(static_cast<size_t>(size), 0),
      last_run_ns_(static_cast<size_t>(size), -1),
      last_at_(static_cast<size_t>(size)) {
  // The segment is zeroed, a valid state for every field; the seat is placement-constructed by
  // its own rank only, before its tid is published (the others read nothing until then).
  Seat& mine = *new (seats_ + static_cast<size_t>(rank) * kSeatBytes) Seat();
  CPU_ZERO(&mine.allowed);
  if (sched_getaffinity(0, sizeof mine.allowed, &mine.allowed) != 0) enabled_ = false;
  mine.pid = static_cast<int32_t>(getpid());
  mine.tid.store(static_cast<int32_t>(os::this_thread_id()), std::memory_order_release);
  // A peer may narrow this rank's thread while it starts threads of its own: they start on the
  // rank's mask instead of the narrowed one.
  if (enabled_) os::register_thread_start_mask(this, mine.allowed);
}

HostRankPlacement::~HostRankPlacement() {
  os::unregister_thread_start_mask(this);
  for (int fd : fds_)
    if (fd >= 0) close(fd);
}

HostRankPlacement::Seat& HostRankPlacement::seat(int r) const {
  return *std::launder(reinterpret_cast<Seat*>(seats_ + static_cast<size_t>(r) * kSeatBytes));
}

int HostRankPlacement::open_schedstat(pid_t pid, pid_t tid) {
  char path[96];
  std::snprintf(path, sizeof path, "/proc/%d/task/%d/schedstat", static_cast<int>(pid),
                static_cast<int>(tid));
  return open(path, O_RDONLY | O_CLOEXEC);
}

int64_t HostRankPlacement::read_run_ns(int fd) {
  char buf[96];
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char* end = nullptr;
  const long long v = std::strtoll(buf, &end, 10);
  return end == buf ? -1 : static_cast<int64_t>(v);
}

void HostRankPlacement::restore_if_moved() {
  Seat& mine = seat(rank_);
  if (mine.moved.exchange(0, std::memory_order_acq_rel) == 0) return;
  // The moved thread's CPU is in the original mask (a peer only ever narrows the mask to CPUs in
  // it), so this does not migrate it. It may be another thread than the caller's, or gone.
  sched_setaffinity(mine.moved_tid.load(std::memory_order_relaxed), sizeof mine.allowed,
                    &mine.allowed);
  ++restores_;
}

bool HostRankPlacement::move(int peer, const cpu_set_t& mask) {
  Seat& s = seat(peer);
  const int32_t tid = s.tid.load(std::memory_order_acquire);
  if (sched_setaffinity(tid, sizeof mask, &mask) != 0) {
    // Not allowed (another user's process) or gone: stop trying; the barrier still works.
    enabled_ = false;
    return false;
  }
  s.moved_tid.store(tid, std::memory_order_relaxed);
  s.moved.store(1, std::memory_order_release);
  return true;
}

void HostRankPlacement::arrive(uint32_t gen) {
  restore_if_moved();
  Seat& mine = seat(rank_);
  mine.tid.store(static_cast<int32_t>(os::this_thread_id()), std::memory_order_relaxed);
  mine.cpu.store(sched_getcpu(), std::memory_order_relaxed);
  mine.arrived_for.store(gen + 1, std::memory_order_release);
  pulled_this_barrier_ = false;
}

void HostRankPlacement::before_wake(bool busy) {
  if (!enabled_ || !busy) return;
  const int here = seat(rank_).cpu.load(std::memory_order_relaxed);
  if (here < 0) return;
  for (int r = 0; r < size_ && enabled_; ++r) {
    if (r == rank_) continue;
    Seat& s = seat(r);
    if (s.tid.load(std::memory_order_acquire) == 0) continue;
    if (s.sleeping.load(std::memory_order_acquire) == 0) continue;
    if (s.cpu.load(std::memory_order_relaxed) != here) continue;
    cpu_set_t elsewhere;
    if (os::mask_without(s.allowed, here, elsewhere) && move(r, elsewhere)) ++placements_;
  }
}

Clock::time_point HostRankPlacement::while_waiting(uint32_t gen, bool busy) {
  const auto now = Clock::now();
  const auto never = now + std::chrono::hours(1);
  if (!enabled_ || !busy || pulled_this_barrier_) return never;
  if (sampled_for_ != gen + 1) {
    sampled_for_ = gen + 1;
    for (auto& v : last_run_ns_) v = -1;
  }
  const int here = sched_getcpu();
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    Seat& s = seat(r);
    const int32_t tid = s.tid.load(std::memory_order_acquire);
    if (tid == 0 || s.arrived_for.load(std::memory_order_acquire) == gen + 1) continue;
    if (here < 0 || !CPU_ISSET(here, &s.allowed)) continue;
    const size_t i = static_cast<size_t>(r);
    if (fd_tids_[i] != tid) {
      // The peer's barriers come from another thread now: follow it.
      if (fds_[i] >= 0) close(fds_[i]);
      fds_[i] = open_schedstat(s.pid, tid);
      fd_tids_[i] = tid;
      last_run_ns_[i] = -1;
    }
    const int64_t run = fds_[i] >= 0 ? read_run_ns(fds_[i]) : -1;
    if (run < 0) continue;
    const int64_t prev = last_run_ns_[i];
    const auto prev_at = last_at_[i];
    last_run_ns_[i] = run;
    last_at_[i] = now;
    if (prev < 0) continue;
    const int64_t wall =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - prev_at).count();
    if (!descheduled(run - prev, wall)) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(here, &one);
    if (move(r, one)) {
      ++pulls_;
      pulled_this_barrier_ = true;
      return never;
    }
  }
  return now + kCheckInterval;
}

int HostRankPlacement::awake_ranks() const {
  int n = 0;
  for (int r = 0; r < size_; ++r) {
    const Seat& s = seat(r);
    if (s.tid.load(std::memory_order_acquire) != 0 &&
        s.sleeping.load(std::memory_order_relaxed) == 0)
      ++n;
  }
  return n;
}

void HostRankPlacement::set_sleeping(bool sleeping) {
  seat(rank_).sleeping.store(sleeping ? 1 : 0, std::memory_order_release);
}

void HostRankPlacement::pass() {
  restore_if_moved();
}

}  // namespace lockstep::distribute::detail
