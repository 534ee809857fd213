#include <chrono>
#include <memory>
#include <mutex>
#include <new>

#include "lockstep/core/check.h"
#include "lockstep/core/error.h"
#include "lockstep/core/profiler.h"

namespace lockstep::profiler {

namespace detail {

std::atomic<bool> g_recording{false};
std::atomic<int64_t> g_step{-1};

// One thread's buffer in one session. Only its thread writes it; collect() reads the first
// `count` spans, published with release ordering.
struct ThreadState {
  Span* spans = nullptr;  // raw storage of `capacity` spans, constructed as they are written
  size_t capacity = 0;
  std::atomic<size_t> count{0};
  std::atomic<uint64_t> dropped{0};
  std::atomic<const char*> label{nullptr};
  std::atomic<int> index{-1};
  int tid = 0;
  ~ThreadState() { ::operator delete(spans); }
};

}  // namespace detail

namespace {

struct Session {
  std::mutex mu;
  RecorderOptions options;
  std::vector<std::unique_ptr<detail::ThreadState>> threads;
  // The previous session's buffers stay allocated until the next start(): a span that began then
  // may still end into them.
  std::vector<std::unique_ptr<detail::ThreadState>> retired;
};

Session& session() {
  static Session s;
  return s;
}

std::atomic<uint64_t> g_generation{0};
std::atomic<int64_t> g_begin_ns{0};

// Trivially constructed thread-locals: reading one costs no initialisation check.
thread_local detail::ThreadState* t_state = nullptr;
thread_local uint64_t t_generation = 0;
thread_local const char* t_label = nullptr;
thread_local int t_index = -1;
thread_local bool t_backup = false;
thread_local bool t_in_step = false;

}  // namespace

namespace detail {

ThreadState* attach() noexcept {
  const uint64_t generation = g_generation.load(std::memory_order_acquire);
  if (t_state != nullptr && t_generation == generation) return t_state;
  Session& s = session();
  std::lock_guard lock(s.mu);
  if (!g_recording.load(std::memory_order_relaxed)) return nullptr;
  auto state = std::make_unique<ThreadState>();
  try {
    // Untouched storage: the pages are mapped as spans are written, not here (the first span of a
    // thread is inside a step being measured).
    state->spans = static_cast<Span*>(::operator new(s.options.spans_per_thread * sizeof(Span)));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  state->capacity = s.options.spans_per_thread;
  state->tid = static_cast<int>(s.threads.size()) + 1;
  state->label.store(t_label, std::memory_order_relaxed);
  state->index.store(t_index, std::memory_order_relaxed);
  try {
    s.threads.push_back(std::move(state));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  t_state = s.threads.back().get();
  t_generation = g_generation.load(std::memory_order_relaxed);
  return t_state;
}

void record(ThreadState* thread, const Span& span) noexcept {
  const size_t n = thread->count.load(std::memory_order_relaxed);
  if (n >= thread->capacity) {
    thread->dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  new (thread->spans + n) Span(span);
  thread->count.store(n + 1, std::memory_order_release);
}

bool backup_run() noexcept {
  return t_backup;
}

void set_backup_run(bool backup) noexcept {
  t_backup = backup;
}

}  // namespace detail

std::string_view phase_name(Phase phase) {
  switch (phase) {
    case Phase::none:
      return "none";
    case Phase::step:
      return "step";
    case Phase::input:
      return "input";
    case Phase::replica:
      return "replica";
    case Phase::forward:
      return "forward";
    case Phase::backward:
      return "backward";
    case Phase::local_reduce:
      return "local_reduce";
    case Phase::all_reduce:
      return "all_reduce";
    case Phase::update:
      return "update";
    case Phase::wait:
      return "wait";
    case Phase::checkpoint:
      return "checkpoint";
    case Phase::tasks:
      return "tasks";
  }
  return "unknown";
}

int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t session_begin_ns() noexcept {
  return g_begin_ns.load(std::memory_order_relaxed);
}

void start(RecorderOptions options) {
  LOCKSTEP_CHECK(options.spans_per_thread != 0,
                 "profiler::start: expected spans_per_thread >= 1. Received: 0.");
  Session& s = session();
  std::lock_guard lock(s.mu);
  LOCKSTEP_CHECK_AS(FailedPrecondition, !detail::g_recording.load(std::memory_order_relaxed),
                    "profiler::start: the profiler is already recording; call profiler::stop() "
                    "first.");
  s.options = options;
  s.retired = std::move(s.threads);
  s.threads.clear();
  detail::g_step.store(-1, std::memory_order_relaxed);
  g_begin_ns.store(now_ns(), std::memory_order_relaxed);
  g_generation.fetch_add(1, std::memory_order_release);
  detail::g_recording.store(true, std::memory_order_release);
}

void stop() {
  detail::g_recording.store(false, std::memory_order_release);
}

std::vector<ThreadSpans> collect() {
  Session& s = session();
  std::lock_guard lock(s.mu);
  std::vector<ThreadSpans> out;
  out.reserve(s.threads.size());
  for (const auto& t : s.threads) {
    ThreadSpans ts;
    ts.tid = t->tid;
    const char* label = t->label.load(std::memory_order_relaxed);
    const int index = t->index.load(std::memory_order_relaxed);
    if (label != nullptr) {
      ts.name = label;
      if (index >= 0) ts.name += " " + std::to_string(index);
    } else {
      ts.name = "thread " + std::to_string(t->tid);
    }
    const size_t n = t->count.load(std::memory_order_acquire);
    ts.spans.assign(t->spans, t->spans + n);
    ts.dropped = t->dropped.load(std::memory_order_relaxed);
    out.push_back(std::move(ts));
  }
  return out;
}

void set_thread_label(const char* label, int index) noexcept {
  t_label = label;
  t_index = index;
  if (t_state != nullptr && t_generation == g_generation.load(std::memory_order_acquire)) {
    t_state->label.store(label, std::memory_order_relaxed);
    t_state->index.store(index, std::memory_order_relaxed);
  }
}

void ScopedSpan::begin(Phase phase, int replica) noexcept {
  thread_ = detail::attach();
  if (thread_ == nullptr) return;
  span_.phase = phase;
  span_.replica = replica;
  span_.step = detail::g_step.load(std::memory_order_relaxed);
  span_.backup = t_backup;
  span_.begin_ns = now_ns();
}

void ScopedSpan::finish() noexcept {
  span_.end_ns = now_ns();
  detail::record(thread_, span_);
  thread_ = nullptr;
}

void StepTrace::begin(int64_t step) noexcept {
  if (!recording() || t_in_step) return;
  // The thread that runs steps is the host unless it was named otherwise.
  if (t_label == nullptr) t_label = "host";
  thread_ = detail::attach();
  if (thread_ == nullptr) return;
  t_in_step = true;
  detail::g_step.store(step, std::memory_order_relaxed);
  span_.phase = Phase::step;
  span_.replica = -1;
  span_.step = step;
  span_.backup = false;
  span_.begin_ns = now_ns();
}

void StepTrace::end() noexcept {
  if (thread_ == nullptr) return;
  span_.end_ns = now_ns();
  detail::record(thread_, span_);
  discard();
}

void StepTrace::discard() noexcept {
  if (thread_ == nullptr) return;
  detail::g_step.store(-1, std::memory_order_relaxed);
  t_in_step = false;
  thread_ = nullptr;
}

}  // namespace lockstep::profiler
