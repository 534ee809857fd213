#pragma once
// The step profiler's recorder: spans of time, per thread, of what a training step does (waiting
// for input, forward, backward, summing the replicas, the update, ...), for a Chrome/Perfetto
// trace and a summary (the trace module: lockstep/trace.h).
//
// Off by default. Off, a span site costs one relaxed atomic load: no clock read, no allocation.
// On (start()), a thread's first span gives it a fixed buffer of RecorderOptions::spans_per_thread
// spans; a span is written there when it ends, with steady_clock times. A full buffer drops further
// spans and counts them (ThreadSpans::dropped); nothing is allocated after that first span.
//
// Spans are scoped (RAII), so the spans of one thread nest and never overlap partially. The
// thread that runs a step opens a StepTrace around it: its span is the outermost, and every span
// that begins on any thread while it is open carries its step number.
//
// A custom training loop (lockstep/distribute/profiler.h writes the files):
//
//   profiler::start();
//   for (int64_t step = 1; step <= steps; ++step) {
//     profiler::StepTrace trace(step);
//     auto batch = it.next();                  // recorded: input
//     strategy.run(step_fn, *batch);           // ScopedSpan(Phase::forward) etc. inside if wanted
//   }
//   profiler::stop();
//   distribute::write_profile("profile", strategy);
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::profiler {

enum class Phase : uint8_t {
  none = 0,      // not recorded
  step,          // one training step, the outermost span on the thread that runs it (StepTrace)
  input,         // waiting for the next batch of the input pipeline
  replica,       // one run of one replica's task: forward, backward and its bookkeeping
  forward,       // forward pass and loss
  backward,      // backward pass (the gradient tape)
  local_reduce,  // summing the local replicas' gradients
  all_reduce,    // cross-worker all-reduce (on a communication thread: under the backward pass)
  update,        // the optimizer's update of the variables
  wait,          // waiting for other threads: a phase's last tasks, runs of an earlier step
  checkpoint,    // writing a checkpoint
  tasks,         // the tasks of a step (and each phase of them), on the thread that hands them to
                 // the pool: holds that thread's task runs and waits; the rest is bookkeeping
                 // between phases, taking tasks, waking threads, or being descheduled while the
                 // other threads run the tasks
};
inline constexpr int kNumPhases = 12;
// Each phase's name is its enumerator's: phase_name(Phase::local_reduce) == "local_reduce".
std::string_view phase_name(Phase phase);

struct Span {
  int64_t begin_ns = 0;  // steady_clock, nanoseconds since its epoch
  int64_t end_ns = 0;
  int64_t step = -1;     // the step whose StepTrace was open when the span began; -1: none
  int32_t replica = -1;  // local replica the span works for; -1: not one replica's
  Phase phase = Phase::none;
  bool backup = false;  // recorded by a backup run of a task (src/distribute/step/task_pool.h)
};

// One thread's spans, in the order they ended (a parent after its children).
struct ThreadSpans {
  int tid = 0;       // 1, 2, ... in the order threads first recorded in this session
  std::string name;  // its label (set_thread_label), else "thread <tid>"
  std::vector<Span> spans;
  uint64_t dropped = 0;  // spans lost to a full buffer
};

struct RecorderOptions {
  // Buffer of each thread that records (32 bytes a span; the pages are touched as they fill). A
  // training step of the seed model records about 60 spans per thread.
  size_t spans_per_thread = size_t{1} << 18;
};

namespace detail {
extern std::atomic<bool> g_recording;
extern std::atomic<int64_t> g_step;
struct ThreadState;
ThreadState* attach() noexcept;  // this thread's buffer for the current session, or nullptr
void record(ThreadState* thread, const Span& span) noexcept;
bool backup_run() noexcept;
void set_backup_run(bool backup) noexcept;
}  // namespace detail

inline bool recording() noexcept {
  return detail::g_recording.load(std::memory_order_relaxed);
}

// Starts a session: clears the spans of the previous one and records from now on. Throws
// FailedPrecondition when already recording and InvalidArgument for a zero buffer size.
void start(RecorderOptions options = {});
// Stops recording. Spans still open end in the buffers of this session.
void stop();
// The spans of the current (or last) session, per thread that recorded. Call it after stop(),
// once the threads that recorded are idle (between steps): it reads their buffers as they are.
std::vector<ThreadSpans> collect();
// steady_clock now, in nanoseconds (the clock of Span).
int64_t now_ns() noexcept;
// When the current (or last) session started, on steady_clock; 0 before any.
int64_t session_begin_ns() noexcept;

// Names this thread's track in the trace: `label` followed by " <index>" when index >= 0
// ("pool thread 2"). `label` must live as long as the program (a string literal).
void set_thread_label(const char* label, int index = -1) noexcept;

// A span from construction to destruction (or end()), recorded when recording is on at
// construction.
class ScopedSpan {
 public:
  explicit ScopedSpan(Phase phase, int replica = -1) noexcept { open(phase, replica); }
  // Not open yet: open() begins it (for a site that decides what to record only when recording).
  ScopedSpan() noexcept = default;
  ~ScopedSpan() { end(); }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;
  // Begins the span if recording is on and none is open in this object.
  void open(Phase phase, int replica = -1) noexcept {
    if (recording() && phase != Phase::none && thread_ == nullptr) begin(phase, replica);
  }
  // Ends the span now (later calls and the destructor do nothing).
  void end() noexcept {
    if (thread_ != nullptr) finish();
  }

 private:
  void begin(Phase phase, int replica) noexcept;
  void finish() noexcept;
  detail::ThreadState* thread_ = nullptr;
  Span span_;
};

// The span of one training step on the thread that runs it; while it is open, spans that begin on
// any thread carry `step`. A StepTrace opened while another is open on the same thread records
// nothing (a custom loop's own numbering wins over fit's or train_on_batch's).
class StepTrace {
 public:
  explicit StepTrace(int64_t step) noexcept { begin(step); }
  ~StepTrace() { end(); }
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;
  // Ends this step's span and begins the span of `step`.
  void next(int64_t step) noexcept {
    end();
    begin(step);
  }
  void end() noexcept;
  // Ends it without recording (what it covered turned out not to be a step).
  void discard() noexcept;

 private:
  void begin(int64_t step) noexcept;
  detail::ThreadState* thread_ = nullptr;
  Span span_;
};

// While alive, the spans this thread records are marked as a backup run's (the task runner opens
// one around a backup run of a task).
class BackupRunScope {
 public:
  explicit BackupRunScope(bool backup) noexcept : active_(backup) {
    if (active_) {
      previous_ = detail::backup_run();
      detail::set_backup_run(true);
    }
  }
  ~BackupRunScope() {
    if (active_) detail::set_backup_run(previous_);
  }
  BackupRunScope(const BackupRunScope&) = delete;
  BackupRunScope& operator=(const BackupRunScope&) = delete;

 private:
  bool active_;
  bool previous_ = false;
};

}  // namespace lockstep::profiler
