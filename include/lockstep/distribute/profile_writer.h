#pragma once
// write_profile: the files of a profile, for every surface (the `lockstep train --profile` flag,
// keras::callbacks::Profiler, a custom loop):
//
//   DIR/trace.json    Chrome/Perfetto trace of every thread of every worker (profile_trace.h)
//   DIR/summary.txt   the summary and its verdicts (profile_summary.h)
//   DIR/steps.svg     the step breakdown over time
//   DIR/report.html   the verdicts, the table and the chart in one file that needs no network
#include <optional>
#include <string>

#include "lockstep/distribute/profile_summary.h"

namespace lockstep::distribute {

class Strategy;

// Collective across the strategy's workers: call it on every worker, after profiler::stop(). It
// first waits until no task of the strategy's pool is running (a task's span ends just after its
// result is committed, which may be after the step returned), then the chief gathers every
// worker's spans, creates `dir` and writes the four files there; it returns the summary. Other
// workers write nothing and return nullopt. Throws FailedPrecondition while the profiler is
// recording and Unavailable when `dir` cannot be written (naming the path).
std::optional<ProfileSummary> write_profile(const std::string& dir, Strategy& strategy,
                                            const VerdictThresholds& thresholds = {});

}  // namespace lockstep::distribute
