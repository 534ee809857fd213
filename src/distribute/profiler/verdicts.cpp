#include <algorithm>
#include <cstdio>
#include <string>

#include "lockstep/distribute/profile_summary.h"

namespace lockstep::distribute {

namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string percent_text(double p) {
  return fixed(p, 1) + "%";
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
  {
    Verdict v{"input", Severity::ok, s.input_percent, ""};
    const std::string what = percent_text(s.input_percent) + " of step time waiting for data";
    if (s.input_percent >= th.input_bound_percent) {
      v.severity = Severity::bound;
      v.message =
          "input-bound: " + what + " - add prefetch / num_parallel_calls / cache before batch";
    } else if (s.input_percent >= th.input_moderate_percent) {
      v.severity = Severity::warning;
      v.message = "moderately input-bound: " + what +
                  " - prefetch / num_parallel_calls / cache before batch may help";
    } else {
      v.message = "not input-bound: " + what;
    }
    out.push_back(v);
  }
  if (s.workers > 1) {
    const double p = s.communication_percent;
    Verdict v{"communication", Severity::ok, p, ""};
    const std::string what =
        percent_text(p) + " of step time waiting for the cross-worker all-reduce (" +
        fixed(s.allreduce_hidden_ms, 3) + " ms per step hidden under backward)";
    if (p >= th.communication_bound_percent) {
      v.severity = Severity::bound;
      v.message = "communication-bound: " + what +
                  " - a larger global batch, bfloat16 gradients across workers (--gradient-dtype "
                  "bfloat16), or smaller buckets (--bytes-per-pack) to overlap more";
    } else {
      v.message = "not communication-bound: " + what;
    }
    out.push_back(v);
  }
  if (s.replicas.size() > 1) {
    const double p = s.replica_wait_percent;
    const ReplicaStats* slowest = &s.replicas.front();
    for (const ReplicaStats& r : s.replicas)
      if (r.last_percent > slowest->last_percent) slowest = &r;
    Verdict v{"stragglers", Severity::ok, p, ""};
    const std::string what = "replica " + std::to_string(slowest->replica) + " finished last in " +
                             percent_text(slowest->last_percent) +
                             " of steps; the other replicas' threads waited " +
                             fixed(s.replica_wait_ms, 3) + " ms per step for the last one (" +
                             percent_text(p) + " of step time)";
    if (p >= th.straggler_percent) {
      v.severity = Severity::warning;
      v.message = "a replica straggles: " + what +
                  " - its thread started late or was descheduled (a busy machine), or its slice "
                  "of the batch is larger";
    } else {
      v.message = "no replica straggles: " + what;
    }
    out.push_back(v);
  }
  if (s.workers > 1) {
    const double p = s.worker_wait_percent;
    const WorkerStats* slowest = &s.worker_stats.front();
    for (const WorkerStats& w : s.worker_stats)
      if (w.last_percent > slowest->last_percent) slowest = &w;
    Verdict v{"stragglers", Severity::ok, p, ""};
    const std::string what = "worker " + std::to_string(slowest->rank) + " was the slowest in " +
                             percent_text(slowest->last_percent) + " of steps; the others waited " +
                             fixed(slowest->others_wait_ms, 3) + " ms per step for it (" +
                             percent_text(p) + " of step time)";
    if (p >= th.straggler_percent) {
      v.severity = Severity::warning;
      v.message = "a worker straggles: " + what +
                  " - its machine is busier or slower, or its input pipeline is";
    } else {
      v.message = "no worker straggles: " + what;
    }
    out.push_back(v);
  }
  const bool has_tasks = std::any_of(s.phases.begin(), s.phases.end(), [](const PhaseRow& r) {
    return r.phase == profiler::Phase::tasks;
  });
  if (has_tasks) {
    const double p = s.scheduling_percent;
    Verdict v{"scheduling", Severity::ok, p, ""};
    const std::string what =
        percent_text(p) +
        " of step time handing tasks to the pool without running or waiting for one";
    if (p >= th.scheduling_percent) {
      v.severity = Severity::warning;
      v.message = "the step's thread was often descheduled: " + what +
                  " - the other threads ran its tasks meanwhile; another program shares the "
                  "cores (fewer pool threads, LOCKSTEP_NUM_THREADS, may help)";
    } else {
      v.message = what;
    }
    out.push_back(v);
  }
  {
    const double p =
        s.task_runs ? 100.0 * static_cast<double>(s.backup_runs) / static_cast<double>(s.task_runs)
                    : 0;
    Verdict v{"backups", Severity::ok, p, ""};
    const std::string what = std::to_string(s.backup_runs) + " backup runs of " +
                             std::to_string(s.task_runs) + " task runs (" + percent_text(p) + ")";
    if (p >= th.backup_percent) {
      v.severity = Severity::warning;
      v.message = "threads are often descheduled: " + what +
                  " - another program shares the cores; the backups keep the step going";
    } else {
      v.message = what;
    }
    out.push_back(v);
  }
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

}  // namespace lockstep::distribute
