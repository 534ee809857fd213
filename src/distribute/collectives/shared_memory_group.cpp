#include "lockstep/distribute/shared_memory_group.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/futex.h"
#include "lockstep/core/check.h"
#include "lockstep/core/cpu_cores.h"
#include "lockstep/core/error.h"
#include "reduce_kernels.h"
#include "seconds_text.h"

namespace lockstep::distribute {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

// What a rank posts before the entry barrier so that the others can read its buffers and check
// that every rank called the same collective with the same arguments.
struct Call {
  const char* name = "";
  size_t count = 0;
  DType dtype = DType::float32;
  int op = -1;
  int root = -1;
  friend bool operator==(const Call& a, const Call& b) {
    return std::string_view(a.name) == b.name && a.count == b.count && a.dtype == b.dtype &&
           a.op == b.op && a.root == b.root;
  }
};

}  // namespace

struct alignas(64) Slot {
  // Barrier arrivals of this rank; read by a rank that times out to name the missing ones.
  std::atomic<uint64_t> arrivals{0};
  // Written by the owner before the entry barrier, read by the others between entry and exit.
  const void* send = nullptr;
  void* recv = nullptr;
  Call call;
};

struct SharedMemoryState {
  SharedMemoryState(int n, const CommunicationOptions& o)
      : size(n), options(o), slots(static_cast<size_t>(n)) {
    // Spinning only pays when every rank has a core; oversubscribed ranks must yield the core to
    // the rank they are waiting for.
    spin =
        n <= available_core_count() ? std::chrono::microseconds(30) : std::chrono::microseconds(0);
  }

  static constexpr uint64_t kPoison = 1ull << 31;  // in the count half of `phase`

  const int size;
  const CommunicationOptions options;
  std::chrono::microseconds spin{0};
  std::vector<Slot> slots;
  // high 32 bits: barrier generation; low 32 bits: ranks arrived in this generation (+ kPoison once
  // a rank timed out). One word, so that "the last rank arrived" and "a waiter gave up" are decided
  // by a single atomic operation and cannot both happen.
  alignas(64) std::atomic<uint64_t> phase{0};
  // Futex word: bumped whenever a generation completes or the group breaks.
  alignas(64) std::atomic<uint32_t> wake{0};
  std::atomic<int> sleepers{0};
  std::atomic<bool> broken{false};
  std::mutex error_mutex;
  StatusCode error_code = StatusCode::internal;
  std::string error_message;

  [[noreturn]] void throw_broken() {
    std::lock_guard lock(error_mutex);
    if (error_code == StatusCode::deadline_exceeded) throw DeadlineExceeded(error_message);
    throw Unavailable(error_message);
  }

  // Records the first error and wakes every sleeper. Caller holds error_mutex.
  void break_locked(StatusCode code, std::string message) {
    if (broken.load(std::memory_order_relaxed)) return;
    error_code = code;
    error_message = std::move(message);
    broken.store(true, std::memory_order_seq_cst);
    wake.fetch_add(1, std::memory_order_seq_cst);
    os::futex_wake_all(&wake);
  }
};

namespace {

class SharedMemoryCommunicator final : public Communicator {
 public:
  SharedMemoryCommunicator(std::shared_ptr<SharedMemoryState> state, int rank)
      : Communicator(state->options),
        state_(std::move(state)),
        rank_(rank),
        srcs_(static_cast<size_t>(state_->size)),
        dsts_(static_cast<size_t>(state_->size)) {}

  int rank() const override { return rank_; }
  int size() const override { return state_->size; }
  std::string_view backend() const override { return "shared_memory"; }

 protected:
  void do_all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override {
    if (!enter(buf, buf, {"all_reduce", count, dtype, static_cast<int>(op), -1})) return;
    // Work is split in whole cache lines (buffers are 64-byte aligned tensors in practice) so that
    // two ranks never write the same line. The split does not affect the result: each element is
    // folded over the ranks in rank order whoever computes it.
    const size_t esize = dtype_size(dtype);
    const size_t per_line = 64 / esize;
    const size_t lines = (count + per_line - 1) / per_line;
    const BlockRange mine = block_range(lines, size(), rank_);
    const size_t begin = std::min(count, mine.begin * per_line);
    const size_t end = std::min(count, mine.end * per_line);
    if (end > begin) {
      for (int k = 0; k < size(); ++k) {
        auto* p = static_cast<std::byte*>(state_->slots[static_cast<size_t>(k)].recv);
        srcs_[static_cast<size_t>(k)] = p + begin * esize;
        dsts_[static_cast<size_t>(k)] = p + begin * esize;
      }
      reduce_fold(dtype, op, srcs_.data(), size(), dsts_.data(), size(), end - begin, size());
    }
    leave();
  }

  void do_reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                         ReduceOp op) override {
    if (!enter(send, recv, {"reduce_scatter", count, dtype, static_cast<int>(op), -1})) return;
    const size_t esize = dtype_size(dtype);
    const BlockRange mine = block_range(count, size(), rank_);
    if (mine.size() > 0) {
      for (int k = 0; k < size(); ++k) {
        srcs_[static_cast<size_t>(k)] =
            static_cast<const std::byte*>(state_->slots[static_cast<size_t>(k)].send) +
            mine.begin * esize;
      }
      dsts_[0] = recv;
      reduce_fold(dtype, op, srcs_.data(), size(), dsts_.data(), 1, mine.size(), size());
    }
    leave();
  }

  void do_all_gather(const void* send, void* recv, size_t count_per_rank, DType dtype) override {
    if (!enter(send, recv, {"all_gather", count_per_rank, dtype, -1, -1})) return;
    const size_t bytes = count_per_rank * dtype_size(dtype);
    for (int k = 0; k < size(); ++k) {
      const void* src = state_->slots[static_cast<size_t>(k)].send;
      void* dst = static_cast<std::byte*>(recv) + static_cast<size_t>(k) * bytes;
      if (src != dst && bytes > 0) std::memcpy(dst, src, bytes);
    }
    leave();
  }

  void do_broadcast(void* buf, size_t count, DType dtype, int root) override {
    if (!enter(buf, buf, {"broadcast", count, dtype, -1, root})) return;
    const void* src = state_->slots[static_cast<size_t>(root)].send;
    if (rank_ != root && count > 0) std::memcpy(buf, src, count * dtype_size(dtype));
    leave();
  }

  // Also posts a Call, like every other collective, so that every collective is exactly two
  // barrier generations (entry, exit) and a barrier() on one rank against, say, an all_reduce on
  // another is detected as a mismatch instead of silently desynchronising the group.
  void do_barrier() override {
    if (!enter(nullptr, nullptr, {"barrier", 0, DType::uint8, -1, -1})) return;
    leave();
  }

 private:
  // Posts this rank's buffers and waits for all ranks. Returns false when there is nothing to do
  // (a group of one: every collective is the identity). Throws, after the exit barrier, if the
  // ranks disagree on the call.
  bool enter(const void* send, void* recv, const Call& call) {
    SharedMemoryState& s = *state_;
    if (s.broken.load(std::memory_order_acquire)) s.throw_broken();
    Slot& slot = s.slots[static_cast<size_t>(rank_)];
    slot.send = send;
    slot.recv = recv;
    slot.call = call;
    if (size() == 1) {
      if (send != recv && call.count > 0 && std::string_view(call.name) != "broadcast") {
        std::memcpy(recv, send, call.count * dtype_size(call.dtype));
      }
      return false;
    }
    arrive_and_wait(/*timed=*/true);
    for (int k = 0; k < size(); ++k) {
      const Call& other = s.slots[static_cast<size_t>(k)].call;
      if (!(other == s.slots[0].call)) {
        const Call& first = s.slots[0].call;
        // The message is built before the exit barrier: after it, the slots are the next call's.
        InvalidArgument error(
            "collective mismatch in " + describe_current() + ": rank 0 called " + first.name +
            " with " + std::to_string(first.count) + " " + std::string(dtype_name(first.dtype)) +
            " elements, rank " + std::to_string(k) + " called " + other.name + " with " +
            std::to_string(other.count) + " " + std::string(dtype_name(other.dtype)) +
            " elements (op/root " + std::to_string(first.op) + "/" + std::to_string(first.root) +
            " vs " + std::to_string(other.op) + "/" + std::to_string(other.root) +
            "). Every rank must make the same collective calls in the same order.");
        arrive_and_wait(/*timed=*/false);  // nobody may still be reading our slots
        throw error;
      }
    }
    return true;
  }

  // The exit barrier keeps every buffer alive until all ranks are done reading it. It has no
  // timeout: every rank that passed the entry barrier is inside the collective's memory loop and
  // will arrive; giving up early would let a caller free a buffer another rank is still reading.
  void leave() { arrive_and_wait(/*timed=*/false); }

  void arrive_and_wait(bool timed) {
    SharedMemoryState& s = *state_;
    Slot& slot = s.slots[static_cast<size_t>(rank_)];
    const uint64_t my_arrivals = slot.arrivals.load(std::memory_order_relaxed) + 1;
    slot.arrivals.store(my_arrivals, std::memory_order_relaxed);
    const uint64_t prev = s.phase.fetch_add(1, std::memory_order_acq_rel);
    const uint64_t gen = prev >> 32;
    // Only entry barriers (timed) can be poisoned. An exit barrier ignores abort(): every rank is
    // inside the collective and arrives, and leaving early would free buffers still being read.
    if (timed &&
        ((prev & SharedMemoryState::kPoison) != 0 || s.broken.load(std::memory_order_acquire))) {
      s.throw_broken();
    }
    if ((prev & 0xffffffffu) + 1 == static_cast<uint64_t>(s.size)) {
      s.phase.store((gen + 1) << 32, std::memory_order_release);
      s.wake.fetch_add(1, std::memory_order_seq_cst);
      if (s.sleepers.load(std::memory_order_seq_cst) > 0) os::futex_wake_all(&s.wake);
      return;
    }

    const auto start = Clock::now();
    if (s.spin.count() > 0) {
      for (int i = 0;; ++i) {
        if ((s.phase.load(std::memory_order_acquire) >> 32) != gen) return;
        if (timed && s.broken.load(std::memory_order_acquire)) s.throw_broken();
        os::cpu_relax();
        if ((i & 63) == 63 && Clock::now() - start > s.spin) break;
      }
    }

    const double timeout = s.options.timeout_seconds;
    const bool has_deadline = timed && timeout > 0;
    const auto deadline =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout));
    s.sleepers.fetch_add(1, std::memory_order_seq_cst);
    struct Leave {
      std::atomic<int>& n;
      ~Leave() { n.fetch_sub(1, std::memory_order_seq_cst); }
    } leave_sleepers{s.sleepers};
    for (;;) {
      // Read the futex word before checking the state: a wake that happens after this load
      // changes the word, so futex_wait returns at once instead of missing it.
      const uint32_t w = s.wake.load(std::memory_order_seq_cst);
      if ((s.phase.load(std::memory_order_acquire) >> 32) != gen) return;
      if (timed && s.broken.load(std::memory_order_acquire)) s.throw_broken();
      if (!has_deadline) {
        os::futex_wait(&s.wake, w, nullptr);
        continue;
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        give_up(gen, my_arrivals);  // returns if the barrier completed meanwhile
        return;
      }
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now);
      timespec ts{static_cast<time_t>(left.count() / 1000000000),
                  static_cast<long>(left.count() % 1000000000)};
      os::futex_wait(&s.wake, w, &ts);
    }
  }

  // Called at the deadline: either the barrier completed in the meantime (return), or poison it in
  // the same atomic word the last arriver needs, break the group and throw DeadlineExceeded.
  void give_up(uint64_t gen, uint64_t my_arrivals) {
    SharedMemoryState& s = *state_;
    std::unique_lock lock(s.error_mutex);
    uint64_t p = s.phase.load(std::memory_order_acquire);
    for (;;) {
      if ((p >> 32) != gen) return;
      if ((p & SharedMemoryState::kPoison) != 0 || s.broken.load(std::memory_order_acquire)) {
        lock.unlock();
        s.throw_broken();
      }
      if ((p & 0xffffffffu) == static_cast<uint64_t>(s.size)) {
        // The last rank is between its arrival and the generation bump: it is complete.
        while ((s.phase.load(std::memory_order_acquire) >> 32) == gen) os::cpu_relax();
        return;
      }
      if (s.phase.compare_exchange_weak(p, p | SharedMemoryState::kPoison,
                                        std::memory_order_acq_rel, std::memory_order_acquire)) {
        break;
      }
    }
    std::string missing, arrived;
    int n_missing = 0;
    for (int k = 0; k < s.size; ++k) {
      const bool here =
          s.slots[static_cast<size_t>(k)].arrivals.load(std::memory_order_relaxed) >= my_arrivals;
      std::string& list = here ? arrived : missing;
      if (!list.empty()) list += ", ";
      list += std::to_string(k);
      if (!here) ++n_missing;
    }
    std::string message = describe_current() + " on a shared-memory group of " +
                          std::to_string(s.size) +
                          " ranks: " + (n_missing == 1 ? "rank " : "ranks ") + missing +
                          " did not arrive within " + seconds_text(s.options.timeout_seconds) +
                          " s (CommunicationOptions::timeout_seconds); ranks " + arrived +
                          " were waiting. A replica that failed or stopped calling collectives "
                          "leaves the others waiting; the group is now broken.";
    s.break_locked(StatusCode::deadline_exceeded, message);
    lock.unlock();
    throw DeadlineExceeded(message);
  }

  std::shared_ptr<SharedMemoryState> state_;
  int rank_;
  std::vector<const void*> srcs_;
  std::vector<void*> dsts_;
};

}  // namespace
}  // namespace detail

SharedMemoryGroup::SharedMemoryGroup(int size, const CommunicationOptions& options) {
  LOCKSTEP_CHECK(size >= 1, "SharedMemoryGroup: expected size >= 1. Received: size=", size);
  state_ = std::make_shared<detail::SharedMemoryState>(size, options);
  for (int r = 0; r < size; ++r) {
    endpoints_.push_back(std::make_shared<detail::SharedMemoryCommunicator>(state_, r));
  }
}

SharedMemoryGroup::~SharedMemoryGroup() = default;

int SharedMemoryGroup::size() const {
  return state_->size;
}

std::shared_ptr<Communicator> SharedMemoryGroup::communicator(int rank) const {
  LOCKSTEP_CHECK(rank >= 0 && rank < state_->size,
                 "SharedMemoryGroup::communicator: expected 0 <= rank < ", state_->size,
                 ". Received: rank=", rank);
  return endpoints_[static_cast<size_t>(rank)];
}

void SharedMemoryGroup::abort(const std::string& reason) {
  std::lock_guard lock(state_->error_mutex);
  state_->break_locked(
      StatusCode::unavailable,
      "shared-memory group of " + std::to_string(state_->size) + " ranks aborted: " + reason);
}

bool SharedMemoryGroup::broken() const {
  return state_->broken.load(std::memory_order_acquire);
}

}  // namespace lockstep::distribute
