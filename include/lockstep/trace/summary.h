#pragma once
// ProfileSummary: what a person reads first about a profile (trace.h) — where each step's
// time went, who was slowest, and verdicts in the spirit of TensorFlow's input-pipeline analyzer.
//
// Per step, the *host view* is the thread that ran the step (its StepTrace): each of its spans
// inside the step counts its exclusive time (its duration less its children's) to its phase, and
// what no span covers is "other", so the rows of a step add up to its wall time exactly. Its
// "tasks (scheduling)" row is the time it spent handing the step's tasks to the pool without
// running one or waiting for one: bookkeeping between phases, taking tasks, waking threads, and —
// on a busy machine — being descheduled while the threads it woke ran the tasks. The
// *all threads* figure adds the exclusive times of every thread of the worker whose spans began
// inside the step (the pool threads working in parallel: forward on two threads counts twice).
//
// Verdicts (thresholds in VerdictThresholds, explained in docs/profiling.md):
//   input          per step, the longest time one thread waited for input (the host's fetch of
//                  the global batch, or a replica's fetch of its own batch inside its task): the
//                  step cannot end sooner. Summed over steps, in percent of step time: >= 20%
//                  input-bound, >= 5% moderately input-bound, else not input-bound.
//   communication  the cross-worker all-reduce the host waited for (not hidden under backward),
//                  in percent of step time: >= 20% communication-bound.
//   stragglers     per step, how long the threads of the other replicas waited for the last one
//                  to finish (a replica run after another on the same thread made nobody wait),
//                  and across workers how long the others waited for the slowest worker, in
//                  percent of step time: >= 10% flagged, naming the replica or worker.
//   scheduling     the host's "tasks (scheduling)" time, in percent of step time: >= 20% means the
//                  step's thread was mostly descheduled while the pool's other threads ran the
//                  tasks (another program shares the cores).
//   backups        backup runs per task run: >= 5% means threads are often descheduled.
//   dropped        spans lost to a full buffer: the figures cover fewer steps than recorded.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/core/profiler.h"
#include "lockstep/trace/trace.h"

namespace lockstep::trace {

struct VerdictThresholds {
  double input_bound_percent = 20;
  double input_moderate_percent = 5;
  double communication_bound_percent = 20;
  double straggler_percent = 10;
  double scheduling_percent = 20;
  double backup_percent = 5;
};

enum class Severity { ok, warning, bound };
// "ok", "warning" or "bound": the word the summary and the report show for a verdict.
const char* severity_name(Severity s);

struct Verdict {
  // "input", "communication", "stragglers", "scheduling", "backups", "dropped" (or "steps")
  std::string topic;
  Severity severity = Severity::ok;
  double percent = 0;  // the measure compared with the thresholds
  std::string message;
};

struct PhaseRow {
  profiler::Phase phase = profiler::Phase::none;  // step: "other", time no span covers
  std::string name;
  double mean_ms = 0, p50_ms = 0, p99_ms = 0;  // per step, host view
  double share_percent = 0;                    // of the summed step time, host view
  double all_threads_ms = 0;                   // per step, every thread of the worker, mean
};

struct ReplicaStats {
  int replica = 0;
  double mean_ms = 0;         // its committed run (the first to finish), mean per step
  double last_percent = 0;    // steps in which it finished last
  double others_wait_ms = 0;  // per step it finished last: mean over the other replicas of how
                              // much later than them it finished, counting only those whose run
                              // ended on another thread (a thread that ran one replica and then
                              // this one did not wait for it)
};

struct WorkerStats {
  int rank = 0;
  double step_ms = 0;     // mean step wall time
  double compute_ms = 0;  // mean step time outside the cross-worker all-reduce
  double last_percent = 0;
  double others_wait_ms = 0;  // per step it was slowest: mean over the others of compute_ms gap
};

// One step of the chief, host view, for the step-breakdown chart.
struct StepBreakdown {
  int64_t step = 0;
  double wall_ms = 0;
  std::array<double, profiler::kNumPhases> ms{};  // index: phase; Phase::step holds "other"
};

struct ProfileSummary {
  int workers = 0;
  int threads = 0;          // tracks of the chief
  int64_t steps = 0;        // (worker, step) samples summarised: the figures per step average them
  int64_t chief_steps = 0;  // steps of the chief
  int64_t first_step = 0, last_step = 0;
  double step_mean_ms = 0, step_p50_ms = 0, step_p99_ms = 0;
  double between_steps_ms = 0;       // mean gap between consecutive steps (callbacks, logs)
  std::vector<PhaseRow> phases;      // host view; the rows add up to the step time
  double input_percent = 0;          // the longest input wait of a thread, of step time
  double communication_percent = 0;  // the cross-worker all-reduce the host waited for
  double replica_wait_ms = 0;        // per step, the other replicas' threads waiting for the last
  double replica_wait_percent = 0;
  double worker_wait_percent = 0;      // the other workers waiting for the slowest, of step time
  double scheduling_percent = 0;       // the host's "tasks (scheduling)" time, of step time
  double allreduce_exposed_ms = 0;     // per step, host waiting for the cross-worker sum
  double allreduce_hidden_ms = 0;      // per step, on the communication thread outside that wait
  std::vector<ReplicaStats> replicas;  // of every worker, pooled by local replica id
  std::vector<WorkerStats> worker_stats;
  uint64_t task_runs = 0, backup_runs = 0;
  int64_t checkpoints = 0;
  double checkpoint_ms = 0;  // total
  uint64_t dropped = 0;
  std::vector<StepBreakdown> timeline;  // the chief's steps in order
  std::vector<Verdict> verdicts;
};

// Throws InvalidArgument when the trace holds no worker (distribute::gather_trace's result off the
// chief). A trace without steps (no StepTrace) gives steps = 0 and a verdict saying so.
ProfileSummary summarize(const ProfileTrace& trace, const VerdictThresholds& thresholds = {});

// The verdicts of a summary (summarize() sets ProfileSummary::verdicts with its thresholds; this
// judges the same measures against others).
std::vector<Verdict> judge(const ProfileSummary& summary, const VerdictThresholds& thresholds = {});

// summary.txt: the table, the slowest replica and worker, the verdicts.
std::string format_summary(const ProfileSummary& summary);

// A stacked bar per step (bins of consecutive steps when there are many) of the chief's host view,
// with its legend: a standalone SVG document.
std::string step_breakdown_svg(const ProfileSummary& summary);

// report.html: the verdicts, the table and the chart in one file that needs no network.
std::string html_report(const ProfileSummary& summary);

}  // namespace lockstep::trace
