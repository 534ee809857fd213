#pragma once
// Umbrella header of the trace module: reading a recorded profile — the Chrome/Perfetto trace,
// the step summary and its verdicts, the SVG and HTML reports. It depends on core alone
// (the spans of lockstep/core/profiler.h); recording and gathering are the profiler's.
#include "lockstep/trace/summary.h"
#include "lockstep/trace/trace.h"
