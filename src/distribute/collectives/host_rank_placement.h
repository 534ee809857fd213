#pragma once
// HostRankPlacement: the ranks of one host spread themselves over its CPUs while they wait for
// each other at the barriers of the shared-memory all-reduce (internal to HostSharedReducer).
//
// Ranks in lockstep look to the kernel like one task: while one computes, the other sleeps at the
// barrier. Beside a busy process the kernel then packs both ranks on one CPU and leaves the other
// to the busy process, or leaves the CPU of the rank that arrived first idle while the late rank
// waits behind the busy process — a newly idle CPU does not take a task that ran within the last
// half millisecond. Either way the job gets one CPU of two where its fair share is 4/3. Two moves,
// each made by a rank that has nothing else to do, and only while the machine has more runnable
// threads than CPUs:
//   - pull: a rank sleeping at a barrier moves a late peer that is *descheduled* (it ran less than
//     a quarter of the last check interval, read from /proc/<pid>/task/<tid>/schedstat) onto its
//     own CPU, which it leaves idle;
//   - place: the last rank to arrive wakes a sleeping peer that last ran on its own CPU with that
//     CPU taken out of the peer's affinity, so that the two compute side by side, not in turns.
// A moved rank restores its own affinity (the mask it started with) at its next barrier, and the
// threads Lockstep starts meanwhile start on that mask (os::adopt_thread_start_mask). Nothing
// moves outside a rank's own mask (ranks bound to a core each by the launcher stay there), and
// nothing moves with more ranks on the host than it has CPUs. Results do not depend on any of
// this, only who waits for whom.
#include <sched.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace lockstep::distribute::detail {

class HostRankPlacement {
 public:
  // What each rank publishes in the shared segment. A zeroed seat is a valid, unpublished one.
  struct Seat {
    alignas(64) std::atomic<int32_t> tid{0};  // the thread at its last barrier; 0 until published
    int32_t pid = 0;
    std::atomic<int32_t> moved_tid{0};     // the thread a peer moved (set before `moved`)
    std::atomic<int32_t> cpu{-1};          // where it ran when it last arrived at a barrier
    std::atomic<uint32_t> arrived_for{0};  // 1 + the generation of that barrier
    std::atomic<uint32_t> sleeping{0};     // in a futex wait at a barrier
    std::atomic<uint32_t> moved{0};        // a peer changed its affinity: restore it
    cpu_set_t allowed;                     // its affinity when it started
  };
  static constexpr size_t kSeatBytes = 256;
  static size_t seats_bytes(int size) { return static_cast<size_t>(size) * kSeatBytes; }
  // How often a sleeping rank looks at its late peers.
  static constexpr std::chrono::microseconds kCheckInterval{100};

  // `seats`: seats_bytes(size) zeroed bytes shared by the host's ranks. Publishes the seat of
  // `rank` for the calling thread; each arrival publishes the thread that arrives (a rank's
  // all-reduces may come from another thread, e.g. the communication thread that overlaps them
  // with backward). `cpus`: the machine's online CPUs; with more ranks than that nothing moves.
  HostRankPlacement(void* seats, int rank, int size, int cpus);
  ~HostRankPlacement();
  HostRankPlacement(const HostRankPlacement&) = delete;
  HostRankPlacement& operator=(const HostRankPlacement&) = delete;

  // This rank arrives at the barrier of generation `gen`.
  void arrive(uint32_t gen);
  // This rank arrived last at `gen` and is about to wake the others; `busy`: the machine has more
  // runnable threads than CPUs.
  void before_wake(bool busy);
  // While sleeping at the barrier of `gen`, at the times it returns: may pull one descheduled late
  // peer onto this CPU (at most one per barrier).
  std::chrono::steady_clock::time_point while_waiting(uint32_t gen, bool busy);
  void set_sleeping(bool sleeping);
  // Passed the barrier: restores the affinity of the thread of this rank that a peer moved (the
  // mask the rank started with), whichever thread passes.
  void pass();

  // Ranks that have published their seat and are not asleep at a barrier (the caller included).
  int awake_ranks() const;

  // Moves made by this rank (pulls, placements) and restores of its own affinity.
  uint64_t pulls() const { return pulls_; }
  uint64_t placements() const { return placements_; }
  uint64_t restores() const { return restores_; }

  // A peer that ran less than a quarter of `wall_ns` in an interval of `wall_ns` is descheduled.
  static bool descheduled(int64_t ran_ns, int64_t wall_ns) {
    return wall_ns > 0 && 4 * ran_ns < wall_ns;
  }
  // The run time in nanoseconds from an open /proc/<pid>/task/<tid>/schedstat (-1: unreadable).
  static int64_t read_run_ns(int fd);
  static int open_schedstat(pid_t pid, pid_t tid);

 private:
  Seat& seat(int r) const;
  void restore_if_moved();
  bool move(int peer, const cpu_set_t& mask);

  std::byte* seats_;
  int rank_;
  int size_;
  bool enabled_;
  // Per peer: its schedstat file and the last sample of its run time during this barrier.
  std::vector<int> fds_;
  std::vector<int32_t> fd_tids_;
  std::vector<int64_t> last_run_ns_;
  std::vector<std::chrono::steady_clock::time_point> last_at_;
  uint32_t sampled_for_ = 0;
  bool pulled_this_barrier_ = false;
  uint64_t pulls_ = 0, placements_ = 0, restores_ = 0;
};

}  // namespace lockstep::distribute::detail
