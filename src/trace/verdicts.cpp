#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <string>

#include "lockstep/trace/summary.h"

namespace lockstep::trace {

namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string percent_text(double p) {
  return fixed(p, 1) + "%";
}

// One level of a verdict: a percentage at or above `at` gets `severity` and the message
// "<label>: <what> - <advice>".
struct Level {
  double at;
  Severity severity;
  const char* label;
  const char* advice;
};

// The verdict on `topic` from its percentage: the first of `levels` (highest first) that it
// reaches, else ok with "<ok_label>: <what>" (or `what` alone without an ok_label).
Verdict grade(const char* topic, double percent, const std::string& what,
              std::initializer_list<Level> levels, const char* ok_label = nullptr) {
  for (const Level& level : levels) {
    if (percent >= level.at) {
      return {topic, level.severity, percent,
              std::string(level.label) + ": " + what + " - " + level.advice};
    }
  }
  return {topic, Severity::ok, percent, ok_label ? std::string(ok_label) + ": " + what : what};
}

}  // namespace

std::vector<Verdict> judge(const ProfileSummary& s, const VerdictThresholds& th) {
  std::vector<Verdict> out;
  if (s.steps == 0) {
    out.push_back({"steps", Severity::warning, 0,
                   "no training step was recorded: fit and train_on_batch mark their steps; a "
                   "custom loop wraps each step in profiler::StepTrace"});
    return out;
  }
  out.push_back(grade("input", s.input_percent,
                      percent_text(s.input_percent) + " of step time waiting for data",
                      {{th.input_bound_percent, Severity::bound, "input-bound",
                        "add prefetch / num_parallel_calls / cache before batch"},
                       {th.input_moderate_percent, Severity::warning, "moderately input-bound",
                        "prefetch / num_parallel_calls / cache before batch may help"}},
                      "not input-bound"));
  if (s.workers > 1) {
    const double p = s.communication_percent;
    out.push_back(grade(
        "communication", p,
        percent_text(p) + " of step time waiting for the cross-worker all-reduce (" +
            fixed(s.allreduce_hidden_ms, 3) + " ms per step hidden under backward)",
        {{th.communication_bound_percent, Severity::bound, "communication-bound",
          "a larger global batch, bfloat16 gradients across workers (--gradient-dtype bfloat16), "
          "or smaller buckets (--bytes-per-pack) to overlap more"}},
        "not communication-bound"));
  }
  if (s.replicas.size() > 1) {
    const double p = s.replica_wait_percent;
    const ReplicaStats* slowest = &s.replicas.front();
    for (const ReplicaStats& r : s.replicas)
      if (r.last_percent > slowest->last_percent) slowest = &r;
    out.push_back(grade(
        "stragglers", p,
        "replica " + std::to_string(slowest->replica) + " finished last in " +
            percent_text(slowest->last_percent) + " of steps; the other replicas' threads waited " +
            fixed(s.replica_wait_ms, 3) + " ms per step for the last one (" + percent_text(p) +
            " of step time)",
        {{th.straggler_percent, Severity::warning, "a replica straggles",
          "its thread started late or was descheduled (a busy machine), or its slice of the batch "
          "is larger"}},
        "no replica straggles"));
  }
  if (s.workers > 1) {
    const double p = s.worker_wait_percent;
    const WorkerStats* slowest = &s.worker_stats.front();
    for (const WorkerStats& w : s.worker_stats)
      if (w.last_percent > slowest->last_percent) slowest = &w;
    out.push_back(grade("stragglers", p,
                        "worker " + std::to_string(slowest->rank) + " was the slowest in " +
                            percent_text(slowest->last_percent) + " of steps; the others waited " +
                            fixed(slowest->others_wait_ms, 3) + " ms per step for it (" +
                            percent_text(p) + " of step time)",
                        {{th.straggler_percent, Severity::warning, "a worker straggles",
                          "its machine is busier or slower, or its input pipeline is"}},
                        "no worker straggles"));
  }
  const bool has_tasks = std::any_of(s.phases.begin(), s.phases.end(), [](const PhaseRow& r) {
    return r.phase == profiler::Phase::tasks;
  });
  if (has_tasks) {
    const double p = s.scheduling_percent;
    out.push_back(grade(
        "scheduling", p,
        percent_text(p) +
            " of step time handing tasks to the pool without running or waiting for one",
        {{th.scheduling_percent, Severity::warning, "the step's thread was often descheduled",
          "the other threads ran its tasks meanwhile; another program shares the cores (fewer "
          "pool threads, LOCKSTEP_NUM_THREADS, may help)"}}));
  }
  const double backup_p =
      s.task_runs ? 100.0 * static_cast<double>(s.backup_runs) / static_cast<double>(s.task_runs)
                  : 0;
  out.push_back(grade("backups", backup_p,
                      std::to_string(s.backup_runs) + " backup runs of " +
                          std::to_string(s.task_runs) + " task runs (" + percent_text(backup_p) +
                          ")",
                      {{th.backup_percent, Severity::warning, "threads are often descheduled",
                        "another program shares the cores; the backups keep the step going"}}));
  if (s.dropped > 0) {
    out.push_back(
        {"dropped", Severity::warning, 0,
         std::to_string(s.dropped) +
             " spans were dropped (full buffers): the figures cover what was kept; profile fewer "
             "steps or raise RecorderOptions::spans_per_thread"});
  }
  return out;
}

const char* severity_name(Severity s) {
  switch (s) {
    case Severity::ok:
      return "ok";
    case Severity::warning:
      return "warning";
    case Severity::bound:
      return "bound";
  }
  return "ok";
}

}  // namespace lockstep::trace
