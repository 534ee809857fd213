#pragma once
// The profiler's distributed end: every worker's recorded spans (lockstep/core/profiler.h)
// gathered to the chief on one clock, and the files of a profile, for every surface (the
// `lockstep train --profile` flag, keras::callbacks::Profiler, a custom loop):
//
//   DIR/trace.json    Chrome/Perfetto trace of every thread of every worker
//   (lockstep/trace/trace.h) DIR/summary.txt   the summary and its verdicts
//   (lockstep/trace/summary.h) DIR/steps.svg     the step breakdown over time DIR/report.html   the
//   verdicts, the table and the chart in one file that needs no network
//
// Recording is the profiler's (here and in core); reading a trace — the summary, the verdicts and
// the reports — is the trace module's, which needs no strategy and no communicator.
#include <optional>
#include <string>

#include "lockstep/trace/summary.h"
#include "lockstep/trace/trace.h"

namespace lockstep::distribute {

class Communicator;
class Strategy;

// The trace module's types under the names this header has always given them, so that
// distribute::ProfileSummary and friends keep compiling.
using trace::format_summary;
using trace::html_report;
using trace::judge;
using trace::PhaseRow;
using trace::ProfileSummary;
using trace::ProfileTrace;
using trace::ReplicaStats;
using trace::Severity;
using trace::severity_name;
using trace::step_breakdown_svg;
using trace::StepBreakdown;
using trace::summarize;
using trace::trace_event_json;
using trace::Verdict;
using trace::VerdictThresholds;
using trace::WorkerSpans;
using trace::WorkerStats;

// This process's spans (profiler::collect()) as worker `rank`, on its own clock.
ProfileTrace local_trace(int rank = 0);

// Collective: every worker calls it, with the communicator between workers (nullptr: one worker,
// this process). Returns every worker's spans on the chief (rank 0) and an empty trace (no
// workers) elsewhere. Workers on one machine share its monotonic clock; a worker on another
// machine (another boot id) is shifted by the difference of the two clocks read right after a
// common barrier, which leaves an error of about one barrier's latency.
ProfileTrace gather_trace(Communicator* cross);

// Collective across the strategy's workers: call it on every worker, after profiler::stop(). It
// first waits until no task of the strategy's pool is running (a task's span ends just after its
// result is committed, which may be after the step returned), then the chief gathers every
// worker's spans, creates `dir` and writes the four files there; it returns the summary. Other
// workers write nothing and return nullopt. Throws FailedPrecondition while the profiler is
// recording and Unavailable when `dir` cannot be written (naming the path).
std::optional<ProfileSummary> write_profile(const std::string& dir, Strategy& strategy,
                                            const VerdictThresholds& thresholds = {});

}  // namespace lockstep::distribute
