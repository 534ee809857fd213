#include <cstdio>
#include <string>

#include "lockstep/trace/summary.h"

namespace lockstep::trace {

namespace {

std::string format(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

}  // namespace

std::string format_summary(const ProfileSummary& s) {
  std::string out = "Lockstep profile: ";
  if (s.steps == 0) {
    out += "no steps recorded\n";
  } else {
    out += format("%lld step(s) (steps %lld..%lld) on %d worker(s)",
                  static_cast<long long>(s.chief_steps), static_cast<long long>(s.first_step),
                  static_cast<long long>(s.last_step), s.workers);
    if (s.workers > 1) out += format(" (%lld worker-steps)", static_cast<long long>(s.steps));
    out += format(", %d thread(s) on the chief\n", s.threads);
    out += format(
        "step time: mean %.3f ms, p50 %.3f ms, p99 %.3f ms; between steps (callbacks, "
        "logs): %.3f ms\n\n",
        s.step_mean_ms, s.step_p50_ms, s.step_p99_ms, s.between_steps_ms);
    out +=
        "Per step, on the thread that ran it (the rows add up to the step time); the last column\n"
        "adds every thread of the worker (threads in parallel count each):\n";
    out += format("  %-18s %9s %9s %9s %7s %15s\n", "phase", "mean ms", "p50 ms", "p99 ms", "share",
                  "all threads ms");
    double share = 0;
    for (const PhaseRow& r : s.phases) {
      out += format("  %-18s %9.3f %9.3f %9.3f %6.1f%% ", r.name.c_str(), r.mean_ms, r.p50_ms,
                    r.p99_ms, r.share_percent);
      out += r.phase == profiler::Phase::step ? format("%15s\n", "-")
                                              : format("%15.3f\n", r.all_threads_ms);
      share += r.share_percent;
    }
    out += format("  %-18s %9.3f %9s %9s %6.1f%%\n\n", "step", s.step_mean_ms, "", "", share);
  }
  if (s.replicas.size() > 1) {
    out += "Replicas (the run that committed; the last to finish holds the step):\n";
    for (const ReplicaStats& r : s.replicas) {
      out += format("  replica %d: %.3f ms per run, finished last in %.1f%% of steps", r.replica,
                    r.mean_ms, r.last_percent);
      if (r.last_percent > 0)
        out += format(" (the others waited %.3f ms for it)", r.others_wait_ms);
      out += "\n";
    }
    out += "\n";
  }
  if (s.workers > 1) {
    out += format(
        "Workers (all-reduce per step: %.3f ms waited for, %.3f ms hidden under "
        "backward):\n",
        s.allreduce_exposed_ms, s.allreduce_hidden_ms);
    for (const WorkerStats& w : s.worker_stats) {
      out += format(
          "  worker %d: step %.3f ms, outside the all-reduce %.3f ms, slowest in %.1f%% "
          "of steps",
          w.rank, w.step_ms, w.compute_ms, w.last_percent);
      if (w.last_percent > 0)
        out += format(" (the others waited %.3f ms for it)", w.others_wait_ms);
      out += "\n";
    }
    out += "\n";
  }
  out += format("Task runs: %llu, backup runs: %llu", static_cast<unsigned long long>(s.task_runs),
                static_cast<unsigned long long>(s.backup_runs));
  if (s.checkpoints > 0) {
    out += format("; checkpoint writes: %lld (%.3f ms in all)",
                  static_cast<long long>(s.checkpoints), s.checkpoint_ms);
  }
  if (s.dropped > 0)
    out += format("; spans dropped: %llu", static_cast<unsigned long long>(s.dropped));
  out += "\n\nVerdicts:\n";
  for (const Verdict& v : s.verdicts)
    out += "  [" + v.topic + ", " + severity_name(v.severity) + "] " + v.message + "\n";
  return out;
}

}  // namespace lockstep::trace
