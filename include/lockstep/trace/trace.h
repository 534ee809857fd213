#pragma once
// ProfileTrace: the spans every worker recorded (lockstep/core/profiler.h), on the chief's clock
// (distribute::gather_trace collects them, lockstep/distribute/profiler.h), and their
// Chrome/Perfetto trace (Trace Event Format, opened as is by
// ui.perfetto.dev and chrome://tracing): one process per worker (pid = world rank), one track per
// thread that recorded (tid), each span a complete event (ph "X", ts and dur in microseconds).
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/core/profiler.h"

namespace lockstep::trace {

struct WorkerSpans {
  int rank = 0;  // world rank: the trace's pid
  std::vector<profiler::ThreadSpans> threads;
};

struct ProfileTrace {
  int64_t origin_ns = 0;  // time 0 of the trace: the chief's profiler::session_begin_ns()
  std::vector<WorkerSpans> workers;  // in rank order
};

// The trace as Trace Event Format JSON: metadata events name each process ("worker 0") and each
// thread (its profiler label), then one "X" event per span, named after its phase ("step 12" for
// a step; " (backup)" appended to a backup run's), with args {step, replica, backup}. Times are
// written in microseconds with three decimals, exactly the recorded nanoseconds, so spans that
// nest in the recording nest in the viewer.
std::string trace_event_json(const ProfileTrace& trace);

}  // namespace lockstep::trace
