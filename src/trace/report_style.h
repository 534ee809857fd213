#pragma once
// The phases as the chart and the report show them: stacking order, colour, label.
#include <cstdio>
#include <string>
#include <vector>

#include "lockstep/core/profiler.h"

namespace lockstep::trace::report_style {

struct PhaseStyle {
  profiler::Phase phase;
  const char* color;
  const char* label;
};

// Bottom to top of a stacked bar: the step's own order (input, compute, reduce, update), then
// waiting and what no span covers.
inline const std::vector<PhaseStyle>& phases() {
  static const std::vector<PhaseStyle> styles = {
      {profiler::Phase::input, "#e15759", "input"},
      {profiler::Phase::forward, "#4e79a7", "forward"},
      {profiler::Phase::backward, "#76b7b2", "backward"},
      {profiler::Phase::replica, "#9c755f", "replica (rest)"},
      {profiler::Phase::local_reduce, "#f28e2b", "local_reduce"},
      {profiler::Phase::all_reduce, "#b07aa1", "all_reduce"},
      {profiler::Phase::update, "#59a14f", "update"},
      {profiler::Phase::checkpoint, "#edc948", "checkpoint"},
      {profiler::Phase::wait, "#bab0ac", "wait"},
      {profiler::Phase::tasks, "#d9c3b0", "tasks (scheduling)"},
      {profiler::Phase::step, "#dddddd", "other (untraced)"},
  };
  return styles;
}

inline const char* color_of(profiler::Phase phase) {
  for (const PhaseStyle& s : phases())
    if (s.phase == phase) return s.color;
  return "#dddddd";
}

// 0.5 -> "0.5", 2 -> "2", 0.25 -> "0.25": axis labels.
inline std::string short_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace lockstep::trace::report_style
