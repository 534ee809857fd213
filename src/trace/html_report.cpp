#include <cstdio>
#include <string>

#include "lockstep/trace/summary.h"
#include "report_style.h"

namespace lockstep::trace {

namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string f3(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

std::string f1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

constexpr const char* kStyle = R"(<style>
body { font-family: sans-serif; margin: 24px auto; max-width: 960px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
table { border-collapse: collapse; }
th, td { padding: 4px 12px; text-align: right; border-bottom: 1px solid #ddd; }
th:first-child, td:first-child { text-align: left; }
tr.total td { font-weight: bold; border-top: 2px solid #888; }
.verdict { padding: 8px 12px; margin: 6px 0; border-left: 6px solid; }
.ok { border-color: #59a14f; background: #eff7ed; }
.warning { border-color: #d4a72c; background: #fdf7e3; }
.bound { border-color: #e15759; background: #fcebeb; }
.swatch { display: inline-block; width: 11px; height: 11px; margin-right: 7px; }
.note { color: #555; font-size: 13px; }
</style>)";

}  // namespace

std::string html_report(const ProfileSummary& s) {
  std::string out =
      "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<title>Lockstep profile</title>\n";
  out += kStyle;
  out += "\n</head><body>\n<h1>Lockstep profile</h1>\n<p>";
  if (s.steps == 0) {
    out += "No training step was recorded.";
  } else {
    out +=
        std::to_string(s.chief_steps) + " step(s) (steps " + std::to_string(s.first_step) + " to " +
        std::to_string(s.last_step) + ") on " + std::to_string(s.workers) + " worker(s)" +
        (s.workers > 1 ? " (" + std::to_string(s.steps) + " worker-steps)" : std::string()) + ", " +
        std::to_string(s.threads) + " thread(s) on the chief. Step time: mean <b>" +
        f3(s.step_mean_ms) + " ms</b>, p50 " + f3(s.step_p50_ms) + " ms, p99 " + f3(s.step_p99_ms) +
        " ms; between steps (callbacks, logs) " + f3(s.between_steps_ms) + " ms.";
  }
  out += "</p>\n<h2>Verdicts</h2>\n";
  for (const Verdict& v : s.verdicts) {
    out += "<div class=\"verdict " + std::string(severity_name(v.severity)) + "\"><b>" +
           escape(v.topic) + "</b>: " + escape(v.message) + "</div>\n";
  }
  if (s.steps > 0) {
    out +=
        "<h2>Where the step time goes</h2>\n<p class=\"note\">Per step, on the thread that ran "
        "it: the rows add up to the step time. The last column adds every thread of the worker "
        "(threads working in parallel count each).</p>\n<table>\n<tr><th>phase</th><th>mean "
        "ms</th><th>p50 ms</th><th>p99 ms</th><th>share</th><th>all threads ms</th></tr>\n";
    double share = 0;
    for (const PhaseRow& r : s.phases) {
      out += "<tr><td><span class=\"swatch\" style=\"background:" +
             std::string(report_style::color_of(r.phase)) + "\"></span>" + escape(r.name) +
             "</td><td>" + f3(r.mean_ms) + "</td><td>" + f3(r.p50_ms) + "</td><td>" + f3(r.p99_ms) +
             "</td><td>" + f1(r.share_percent) + "%</td><td>" +
             (r.phase == profiler::Phase::step ? std::string("-") : f3(r.all_threads_ms)) +
             "</td></tr>\n";
      share += r.share_percent;
    }
    out += "<tr class=\"total\"><td>step</td><td>" + f3(s.step_mean_ms) + "</td><td>" +
           f3(s.step_p50_ms) + "</td><td>" + f3(s.step_p99_ms) + "</td><td>" + f1(share) +
           "%</td><td></td></tr>\n</table>\n";
  }
  out += "<h2>Step breakdown over time</h2>\n" + step_breakdown_svg(s);
  if (s.replicas.size() > 1) {
    out +=
        "<h2>Replicas</h2>\n<p class=\"note\">Each replica's run that committed (the first to "
        "finish); the last replica to finish holds the step.</p>\n<table>\n<tr><th>replica</"
        "th><th>ms per run</th><th>finished last</th><th>others waited for it (ms)</th></tr>\n";
    for (const ReplicaStats& r : s.replicas) {
      out += "<tr><td>" + std::to_string(r.replica) + "</td><td>" + f3(r.mean_ms) + "</td><td>" +
             f1(r.last_percent) + "% of steps</td><td>" + f3(r.others_wait_ms) + "</td></tr>\n";
    }
    out += "</table>\n";
  }
  if (s.workers > 1) {
    out += "<h2>Workers</h2>\n<p class=\"note\">Cross-worker all-reduce per step: " +
           f3(s.allreduce_exposed_ms) + " ms waited for, " + f3(s.allreduce_hidden_ms) +
           " ms hidden under backward. The worker with the most time outside the all-reduce makes "
           "the others wait in it.</p>\n<table>\n<tr><th>worker</th><th>step ms</th><th>outside "
           "the all-reduce ms</th><th>slowest</th><th>others waited for it (ms)</th></tr>\n";
    for (const WorkerStats& w : s.worker_stats) {
      out += "<tr><td>" + std::to_string(w.rank) + "</td><td>" + f3(w.step_ms) + "</td><td>" +
             f3(w.compute_ms) + "</td><td>" + f1(w.last_percent) + "% of steps</td><td>" +
             f3(w.others_wait_ms) + "</td></tr>\n";
    }
    out += "</table>\n";
  }
  out += "<p class=\"note\">Task runs: " + std::to_string(s.task_runs) +
         ", backup runs: " + std::to_string(s.backup_runs);
  if (s.checkpoints > 0) {
    out += "; checkpoint writes: " + std::to_string(s.checkpoints) + " (" + f3(s.checkpoint_ms) +
           " ms in all)";
  }
  if (s.dropped > 0) out += "; spans dropped: " + std::to_string(s.dropped);
  out +=
      ".<br>The whole timeline, every thread of every worker: <code>trace.json</code> beside "
      "this file (open it in ui.perfetto.dev or chrome://tracing). How to read each verdict: "
      "docs/profiling.md.</p>\n</body></html>\n";
  return out;
}

}  // namespace lockstep::trace
