#include "host_shared_reducer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/cpu_load.h"
#include "core/futex.h"
#include "lockstep/core/check.h"
#include "lockstep/core/error.h"
#include "reduce_kernels.h"

namespace lockstep::distribute::detail {
namespace {

using Clock = std::chrono::steady_clock;

// With a spare core a waiter watches the shared word this long before it sleeps: ranks of a quiet
// host arrive within microseconds of each other, and a futex wake-up costs tens of them on a VM.
constexpr std::chrono::microseconds kSpin{200};
// How often busy() reads /proc/stat (about as costly as a short spin).
constexpr std::chrono::milliseconds kBusyEvery{20};
// How often a sleeping waiter wakes to answer failure diagnosis and check its deadline.
constexpr std::chrono::milliseconds kPollEvery{1};
constexpr size_t kHeaderBytes = 4096;
// Segment budget for all slots of both sets; a slot holds at least one 256 KiB pack.
constexpr size_t kSegmentBudget = size_t{32} << 20;
constexpr size_t kMinSlot = size_t{256} << 10;
constexpr size_t kMaxSlot = size_t{4} << 20;

// The ranks' seats (HostRankPlacement) follow the header, in whole pages.
size_t seats_area(int size) {
  return (HostRankPlacement::seats_bytes(size) + kHeaderBytes - 1) / kHeaderBytes * kHeaderBytes;
}

}  // namespace

struct HostSharedReducer::Header {
  alignas(64) std::atomic<uint32_t> arrived{0};
  alignas(64) std::atomic<uint32_t> generation{0};  // futex word, bumped by the last arrival
  // Per slot set: whether the pack in it is reduced after one barrier (rank 0 decides before it
  // arrives; the others read it once past the barrier). A rank reads a set only until it arrives
  // at the next pack's barrier, and rank 0 writes the set's word again two packs later, after
  // that barrier.
  alignas(64) std::atomic<uint32_t> one_barrier[2]{};
};

HostSharedReducer::Barriers HostSharedReducer::barriers_from_environment() {
  const char* env = std::getenv("LOCKSTEP_MPI_HOST_SHARED_BARRIERS");
  if (env == nullptr || *env == '\0') return Barriers::automatic;
  const std::string v(env);
  if (v == "1") return Barriers::one;
  if (v == "2") return Barriers::two;
  throw InvalidArgument(
      "LOCKSTEP_MPI_HOST_SHARED_BARRIERS must be 1 or 2 (unset: one barrier per "
      "pack while the machine is busy, two while it is quiet), got \"" +
      v + "\".");
}

std::unique_ptr<HostSharedReducer> HostSharedReducer::create(MPI_Comm control, int rank, int size,
                                                             bool all_on_one_host, bool enabled) {
  // Before any collective, so that a bad value fails every rank that has it at the same point.
  const Barriers barriers = barriers_from_environment();
  // Every rank must take the same path, so the decision and each step's success are agreed on.
  auto agree = [&](bool mine) {
    int v = mine ? 1 : 0;
    if (MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, control) != MPI_SUCCESS) return false;
    return v == 1;
  };
  if (size < 2 || !agree(all_on_one_host && enabled)) return nullptr;
  const size_t slot =
      std::clamp(kSegmentBudget / (2 * static_cast<size_t>(size)) / 64 * 64, kMinSlot, kMaxSlot);
  const size_t bytes = kHeaderBytes + seats_area(size) + 2 * static_cast<size_t>(size) * slot;

  char name[64] = {};
  int fd = -1;
  if (rank == 0) {
    static std::atomic<int> counter{0};
    std::snprintf(name, sizeof name, "/lockstep-%d-%d", static_cast<int>(getpid()),
                  counter.fetch_add(1));
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    // posix_fallocate, not ftruncate: a /dev/shm too small for the segment fails here instead of
    // killing the job with SIGBUS at the first touch of a missing page.
    if (fd >= 0 && posix_fallocate(fd, 0, static_cast<off_t>(bytes)) != 0) {
      close(fd);
      shm_unlink(name);
      fd = -1;
    }
    if (fd < 0) name[0] = '\0';
  }
  if (MPI_Bcast(name, sizeof name, MPI_CHAR, 0, control) != MPI_SUCCESS) return nullptr;
  if (name[0] == '\0') return nullptr;  // rank 0 could not create it: all fall back
  if (rank != 0) fd = shm_open(name, O_RDWR, 0600);
  void* base = MAP_FAILED;
  if (fd >= 0) {
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
  }
  const bool mapped = base != MAP_FAILED;
  const bool all_mapped = agree(mapped);
  // Every rank has opened the name (or given up): it is no longer needed.
  if (rank == 0) shm_unlink(name);
  if (!all_mapped) {
    if (mapped) munmap(base, bytes);
    return nullptr;
  }
  std::unique_ptr<HostSharedReducer> reducer(new HostSharedReducer(base, bytes, rank, size, slot));
  reducer->barriers_ = barriers;
  return reducer;
}

HostSharedReducer::HostSharedReducer(void* base, size_t bytes, int rank, int size,
                                     size_t slot_bytes)
    : base_(base),
      mapped_bytes_(bytes),
      header_(static_cast<Header*>(base)),
      rank_(rank),
      size_(size),
      slot_bytes_(slot_bytes),
      cpus_(os::online_cpu_count()),
      placement_(static_cast<std::byte*>(base) + kHeaderBytes, rank, size, cpus_) {
  // The segment starts zeroed (posix_fallocate), which is the header's initial state; the
  // futex words must be plain 32-bit words at fixed offsets for every process.
  static_assert(sizeof(Header) <= kHeaderBytes);
  static_assert(std::atomic<uint32_t>::is_always_lock_free);
  srcs_.resize(static_cast<size_t>(size));
}

HostSharedReducer::~HostSharedReducer() {
  munmap(base_, mapped_bytes_);
}

std::byte* HostSharedReducer::slot(int set, int rank) const {
  return static_cast<std::byte*>(base_) + kHeaderBytes + seats_area(size_) +
         (static_cast<size_t>(set) * static_cast<size_t>(size_) + static_cast<size_t>(rank)) *
             slot_bytes_;
}

bool HostSharedReducer::busy() {
  const auto now = Clock::now();
  if (now - checked_ < kBusyEvery) return busy_;
  const bool first = checked_ == Clock::time_point{};
  checked_ = now;
  // The host's other runnable threads: procs_running counts this job's ranks only while they are
  // awake. Both counts are the whole machine's, not this rank's affinity: the peers are other
  // processes, whose cores need not be this one's (a rank that the launcher bound to one core, as
  // Open MPI does for 2 ranks, compared procs_running with its one core, never spun while its
  // peer ran on the other, and slept through every barrier; docs/performance.md, "Measured design
  // choices"). With more ranks than CPUs the job itself oversubscribes the host; there the instant
  // count is what tells whether a waiter can spin (counting asleep ranks as runnable would never
  // let it, which was slower beside a co-runner; docs/performance.md, "Measured design choices").
  const int running = os::procs_running();
  const int counted = size_ <= cpus_ ? running - placement_.awake_ranks() + size_ : running;
  const bool sample = running < 0 || counted > cpus_;
  // Two samples in a row change the state: a rank that woke between the two reads counts as
  // another process for one sample.
  if (first) {
    busy_ = sample;
  } else if (sample != busy_) {
    if (++contrary_ >= 2) {
      busy_ = sample;
      contrary_ = 0;
    }
  } else {
    contrary_ = 0;
  }
  return busy_;
}

void HostSharedReducer::barrier(const std::function<void()>& poll) {
  Header& h = *header_;
  // Read the generation before arriving: the last arrival resets `arrived` before it bumps the
  // generation, so a rank that sees the new generation also sees the reset count.
  const uint32_t gen = h.generation.load(std::memory_order_acquire);
  placement_.arrive(gen);
  if (h.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(size_)) {
    placement_.before_wake(busy());
    h.arrived.store(0, std::memory_order_relaxed);
    h.generation.fetch_add(1, std::memory_order_release);
    os::futex_wake_all_shared(&h.generation);
    return;
  }
  auto passed = [&] { return h.generation.load(std::memory_order_acquire) != gen; };
  const bool spin = !busy();
  if (spin) {
    const auto until = Clock::now() + kSpin;
    for (int i = 0;; ++i) {
      os::cpu_relax();
      if (passed()) return;
      if ((i & 63) == 63 && Clock::now() > until) break;
    }
  }
  placement_.set_sleeping(true);
  auto next_poll = Clock::now() + kPollEvery;
  auto next_check = placement_.while_waiting(gen, !spin);
  while (!passed()) {
    const auto now = Clock::now();
    os::futex_wait_shared_for(&h.generation, gen, std::min(next_poll, next_check) - now);
    if (passed()) break;
    const auto after = Clock::now();
    if (after >= next_check) next_check = placement_.while_waiting(gen, busy());
    if (after >= next_poll) {
      next_poll = after + kPollEvery;
      poll();
    }
  }
  placement_.set_sleeping(false);
  placement_.pass();
}

void HostSharedReducer::all_reduce(void* buf, size_t count, DType dtype, ReduceOp op,
                                   const std::function<void()>& poll) {
  LOCKSTEP_CHECK_AS(Internal, dtype != DType::bfloat16,
                    "HostSharedReducer::all_reduce: bfloat16 must be widened by the caller");
  const size_t esize = dtype_size(dtype);
  const size_t pack = slot_bytes_ / esize;
  auto* bytes = static_cast<std::byte*>(buf);
  // One round even for count 0, so that every rank passes the same barriers.
  for (size_t begin = 0; begin < count || (count == 0 && begin == 0); begin += pack) {
    const size_t n = std::min(pack, count - begin);
    const int set = set_;
    set_ ^= 1;
    std::memcpy(slot(set, rank_), bytes + begin * esize, n * esize);
    if (rank_ == 0) {
      // Automatically only for two ranks, which read as many bytes either way (each rank reads
      // every slot once in the one form, twice the pack in the other): with four ranks on two
      // cores the one form reads twice as much (docs/performance.md, "Measured design choices").
      const bool one =
          barriers_ == Barriers::one || (barriers_ == Barriers::automatic && size_ == 2 && busy());
      header_->one_barrier[set].store(one ? 1 : 0, std::memory_order_relaxed);
    }
    barrier(poll);
    if (header_->one_barrier[set].load(std::memory_order_relaxed) != 0) {
      // Every rank folds the whole pack into its own buffer, in rank order as below (the same
      // bits). The slots stay as they are until every rank has arrived at the next pack's barrier
      // (the one after writes the other set), so no second barrier is needed. Quiet, the two
      // barriers below are faster (each rank reads and adds half as much); on a busy
      // machine every barrier is a place to wait for a descheduled peer.
      for (int r = 0; r < size_; ++r) srcs_[static_cast<size_t>(r)] = slot(set, r);
      void* dst[1] = {bytes + begin * esize};
      reduce_fold(dtype, op, srcs_.data(), size_, dst, 1, n, size_);
      if (count == 0) break;
      continue;
    }
    const BlockRange mine = block_range(n, size_, rank_);
    if (mine.size() > 0) {
      for (int r = 0; r < size_; ++r) {
        srcs_[static_cast<size_t>(r)] = slot(set, r) + mine.begin * esize;
      }
      // The block goes to the slot, for the others, and straight to this rank's buffer.
      void* dsts[2] = {slot(set, rank_) + mine.begin * esize, bytes + (begin + mine.begin) * esize};
      reduce_fold(dtype, op, srcs_.data(), size_, dsts, 2, mine.size(), size_);
    }
    barrier(poll);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const BlockRange block = block_range(n, size_, r);
      std::memcpy(bytes + (begin + block.begin) * esize, slot(set, r) + block.begin * esize,
                  block.size() * esize);
    }
    if (count == 0) break;
  }
}

}  // namespace lockstep::distribute::detail
