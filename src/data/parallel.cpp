// Background stages: parallel map and prefetch. Threads start on the first next() (so a restored
// iterator can skip cheaply first) and are joined in the destructor, whatever state they are in:
// every wait also wakes on `stop_`, and no thread ever waits for the consumer while holding the
// input.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>

#include "core/cpu_affinity.h"
#include "internal.h"
#include "lockstep/core/check.h"
#include "lockstep/core/cpu_cores.h"

namespace lockstep::data_internal {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Exponential moving average of a duration (seconds); 0 until the first sample.
struct Ema {
  double value = 0;
  void add(double x) { value = value == 0 ? x : 0.9 * value + 0.1 * x; }
};

// ----- parallel map
class ParallelMapIterator : public IteratorImpl {
 public:
  ParallelMapIterator(std::unique_ptr<IteratorImpl> input, const Dataset::MapFn* fn,
                      const MapOptions& options)
      : input_(std::move(input)),
        fn_(fn),
        deterministic_(options.deterministic),
        autotune_(options.num_parallel_calls == Dataset::AUTOTUNE),
        threads_(autotune_ ? available_core_count() : options.num_parallel_calls),
        capacity_(2 * threads_),
        target_(autotune_ ? 1 : threads_),
        slots_(static_cast<size_t>(capacity_)) {}

  ~ParallelMapIterator() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    space_cv_.notify_all();
    ready_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  bool next(Element& out) override {
    if (workers_.empty()) start();
    std::unique_lock lock(mu_);
    if (last_return_ != Clock::time_point{}) consumer_time_.add(seconds_since(last_return_));
    Result r;
    if (deterministic_) {
      Slot& s = slots_[static_cast<size_t>(next_out_ % capacity_)];
      ready_cv_.wait(lock, [&] { return s.ready || next_out_ >= end_seq_; });
      if (!s.ready) return false;
      r = std::move(s.result);
      s.ready = false;
      ++next_out_;
    } else {
      ready_cv_.wait(lock, [&] { return !done_.empty() || (input_done_ && active_ == 0); });
      if (done_.empty()) return false;
      r = std::move(done_.front());
      done_.pop_front();
    }
    --reserved_;
    retune();
    lock.unlock();
    space_cv_.notify_one();
    last_return_ = Clock::now();
    if (r.error) std::rethrow_exception(r.error);
    out = std::move(r.value);
    return true;
  }

  int64_t skip(int64_t n) override {
    // Before the workers start the input can skip directly (the map function is pure).
    if (workers_.empty()) return input_->skip(n);
    return IteratorImpl::skip(n);
  }

 private:
  struct Result {
    Element value;
    std::exception_ptr error;
  };
  struct Slot {
    Result result;
    bool ready = false;
  };

  void start() {
    workers_.reserve(static_cast<size_t>(threads_));
    for (int64_t i = 0; i < threads_; ++i) workers_.emplace_back([this] { work(); });
  }

  // AUTOTUNE: run as many calls at once as it takes for the map to keep pace with the consumer,
  // i.e. ceil(time per call / time the consumer spends between two next() calls).
  void retune() {
    if (!autotune_ || fn_time_.value == 0 || consumer_time_.value == 0) return;
    double want = std::ceil(fn_time_.value / std::max(consumer_time_.value, 1e-9));
    int64_t t = std::clamp<int64_t>(static_cast<int64_t>(want), 1, threads_);
    if (t > target_) space_cv_.notify_all();
    target_ = t;
  }

  void work() {
    os::adopt_thread_start_mask();
    Element in;
    std::unique_lock lock(mu_);
    for (;;) {
      space_cv_.wait(lock, [&] {
        return stop_ || input_done_ || (reserved_ < capacity_ && active_ < target_);
      });
      if (stop_ || input_done_) return;
      ++reserved_;
      ++active_;
      lock.unlock();

      Result r;
      int64_t seq;
      bool got = false;
      {
        // Pulls are serialised and numbered in pull order, which is input order.
        std::lock_guard input_lock(input_mu_);
        seq = next_pull_++;
        if (!input_exhausted_) {
          try {
            got = input_->next(in);
          } catch (...) {
            r.error = std::current_exception();
          }
          if (!got) input_exhausted_ = true;
        }
      }
      if (got) {
        auto t0 = Clock::now();
        try {
          r.value = (*fn_)(in);
        } catch (...) {
          r.error = std::current_exception();
        }
        double dt = seconds_since(t0);
        lock.lock();
        fn_time_.add(dt);
      } else {
        lock.lock();
      }

      --active_;
      if (!got && !r.error) {
        // End of input: `seq` is the first sequence number with no element.
        input_done_ = true;
        end_seq_ = std::min(end_seq_, seq);
        --reserved_;
      } else {
        if (!got) {  // the input failed: deliver the error, then end
          input_done_ = true;
          end_seq_ = std::min(end_seq_, seq + 1);
        }
        if (deterministic_) {
          Slot& s = slots_[static_cast<size_t>(seq % capacity_)];
          s.result = std::move(r);
          s.ready = true;
        } else {
          done_.push_back(std::move(r));
        }
      }
      ready_cv_.notify_all();
      if (input_done_) space_cv_.notify_all();
    }
  }

  std::unique_ptr<IteratorImpl> input_;
  const Dataset::MapFn* fn_;
  const bool deterministic_;
  const bool autotune_;
  const int64_t threads_;
  const int64_t capacity_;  // results pulled and not yet consumed, at most

  std::mutex input_mu_;  // guards input_, next_pull_, input_exhausted_
  int64_t next_pull_ = 0;
  bool input_exhausted_ = false;

  std::mutex mu_;                     // guards everything below
  std::condition_variable ready_cv_;  // consumer waits for a result
  std::condition_variable space_cv_;  // workers wait for room or a higher target
  int64_t target_;
  std::vector<Slot> slots_;  // deterministic: result of seq s in slot s % capacity_
  std::deque<Result> done_;  // non-deterministic: results in completion order
  int64_t reserved_ = 0, active_ = 0;
  int64_t next_out_ = 0;
  int64_t end_seq_ = std::numeric_limits<int64_t>::max();
  bool input_done_ = false;
  bool stop_ = false;
  Ema fn_time_, consumer_time_;
  Clock::time_point last_return_{};  // consumer thread only

  std::vector<std::thread> workers_;
};

// ----- prefetch
// The prefetch thread runs at nice 19 (LOCKSTEP_PREFETCH_NICE overrides; 0 keeps the caller's):
// in training every core runs a pinned replica, and a producer at equal priority preempts one of
// them for its whole time slice while the others wait for it at the next barrier. At nice 19 it
// runs when a replica waits (a barrier, a sleep between dispatches) or when the replicas wait for
// its data, which is the moment it is needed (docs/data.md; docs/performance.md, "Measured design
// choices"). Only ever lowers the priority, which needs no privilege.
void lower_priority() {
  int nice = 19;
  if (const char* v = std::getenv("LOCKSTEP_PREFETCH_NICE")) nice = std::atoi(v);
  if (nice <= 0) return;
  const auto tid = static_cast<id_t>(gettid());
  errno = 0;
  const int current = getpriority(PRIO_PROCESS, tid);
  if (errno == 0 && current < nice) setpriority(PRIO_PROCESS, tid, nice);
}

class PrefetchIterator : public IteratorImpl {
 public:
  static constexpr int64_t kAutotuneMax = 64;

  PrefetchIterator(std::unique_ptr<IteratorImpl> input, int64_t buffer_size)
      : input_(std::move(input)),
        autotune_(buffer_size == Dataset::AUTOTUNE),
        capacity_(autotune_ ? 1 : buffer_size) {}

  ~PrefetchIterator() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  bool next(Element& out) override {
    if (!thread_.joinable()) thread_ = std::thread([this] { produce(); });
    std::unique_lock lock(mu_);
    if (last_return_ != Clock::time_point{}) consumer_time_.add(seconds_since(last_return_));
    if (queue_.empty() && !finished_) {
      // AUTOTUNE (tf.data's prefetch autotuner, refined by rates): the buffer ran dry, so it was
      // too small to absorb the producer's jitter. Grow it (x2) while the producer is on average
      // at least as fast as the consumer; when it is slower, a bigger buffer cannot help.
      if (autotune_ && capacity_ < kAutotuneMax &&
          (producer_time_.value == 0 || producer_time_.value <= consumer_time_.value * 1.5)) {
        capacity_ = std::min(kAutotuneMax, capacity_ * 2);
        cv_.notify_all();
      }
      cv_.wait(lock, [&] { return !queue_.empty() || finished_; });
    }
    if (queue_.empty()) {
      if (error_) {
        auto e = error_;
        error_ = nullptr;
        std::rethrow_exception(e);
      }
      return false;
    }
    out = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    cv_.notify_all();
    last_return_ = Clock::now();
    return true;
  }

  int64_t skip(int64_t n) override {
    if (!thread_.joinable()) return input_->skip(n);
    return IteratorImpl::skip(n);
  }

 private:
  void produce() {
    os::adopt_thread_start_mask();
    lower_priority();
    Element e;
    for (;;) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || static_cast<int64_t>(queue_.size()) < capacity_; });
        if (stop_) return;
      }
      bool got = false;
      std::exception_ptr error;
      auto t0 = Clock::now();
      try {
        got = input_->next(e);
      } catch (...) {
        error = std::current_exception();
      }
      double dt = seconds_since(t0);
      {
        std::lock_guard lock(mu_);
        producer_time_.add(dt);
        if (got) {
          queue_.push_back(std::move(e));
        } else {
          error_ = error;
          finished_ = true;
        }
      }
      cv_.notify_all();
      if (!got) return;
    }
  }

  std::unique_ptr<IteratorImpl> input_;  // producer thread only, once started
  const bool autotune_;

  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  int64_t capacity_;
  std::deque<Element> queue_;
  bool finished_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  Ema producer_time_, consumer_time_;
  Clock::time_point last_return_{};  // consumer thread only

  std::thread thread_;
};

class PrefetchNode : public Node {
 public:
  PrefetchNode(std::shared_ptr<const Node> input, int64_t buffer_size)
      : input_(std::move(input)), buffer_size_(buffer_size) {
    LOCKSTEP_CHECK(buffer_size > 0 || buffer_size == Dataset::AUTOTUNE,
                   "Dataset::prefetch: buffer_size must be > 0 or AUTOTUNE (-1). Received ",
                   buffer_size, ".");
  }
  std::unique_ptr<IteratorImpl> make_iterator(const IterContext& ctx) const override {
    return std::make_unique<PrefetchIterator>(input_->make_iterator(ctx), buffer_size_);
  }
  int64_t cardinality() const override { return input_->cardinality(); }
  ElementSpec element_spec() const override { return input_->element_spec(); }
  std::string to_string() const override {
    return input_->to_string() + " -> Prefetch(" +
           (buffer_size_ == Dataset::AUTOTUNE ? "AUTOTUNE" : std::to_string(buffer_size_)) + ")";
  }

  std::vector<std::shared_ptr<const Node>> inputs() const override { return {input_}; }
  std::shared_ptr<const Node> with_inputs(
      std::vector<std::shared_ptr<const Node>> in) const override {
    return make_prefetch(std::move(in[0]), buffer_size_);
  }

 private:
  std::shared_ptr<const Node> input_;
  int64_t buffer_size_;
};

}  // namespace

std::unique_ptr<IteratorImpl> make_parallel_map_iterator(std::unique_ptr<IteratorImpl> input,
                                                         const Dataset::MapFn* fn,
                                                         const MapOptions& options) {
  return std::make_unique<ParallelMapIterator>(std::move(input), fn, options);
}

std::shared_ptr<const Node> make_prefetch(std::shared_ptr<const Node> input, int64_t buffer_size) {
  return std::make_shared<PrefetchNode>(std::move(input), buffer_size);
}

}  // namespace lockstep::data_internal
