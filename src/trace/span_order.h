#pragma once
// The order of one thread's spans in which a parent comes before its children: earlier begin
// first, then the longer. Spans with equal times (a parent whose only child took all of it, at
// the clock's resolution) keep the recorder's meaning: the one recorded later ended later, so it
// is the parent. `a` and `b` point into the same thread's vector of spans, in recording order.
#include "lockstep/core/profiler.h"

namespace lockstep::trace::span_order {

inline bool parent_first(const profiler::Span* a, const profiler::Span* b) {
  if (a->begin_ns != b->begin_ns) return a->begin_ns < b->begin_ns;
  if (a->end_ns != b->end_ns) return a->end_ns > b->end_ns;
  return a > b;
}

}  // namespace lockstep::trace::span_order
