#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "lockstep/core/check.h"
#include "lockstep/core/error.h"
#include "lockstep/trace/summary.h"
#include "span_order.h"

namespace lockstep::trace {

namespace {

using profiler::Phase;
using profiler::Span;
constexpr size_t kPhases = profiler::kNumPhases;

size_t index(Phase p) {
  return static_cast<size_t>(p);
}
double ms(int64_t ns) {
  return static_cast<double>(ns) * 1e-6;
}
bool is_task(Phase p) {
  return p == Phase::replica || p == Phase::update || p == Phase::local_reduce;
}

// One thread's spans, parents before children, with each span's parent, top-level ancestor and
// exclusive time (its duration less its direct children's).
struct Forest {
  std::vector<const Span*> spans;
  std::vector<int> parent, root;
  std::vector<int64_t> exclusive;
};

Forest build_forest(const profiler::ThreadSpans& t) {
  Forest f;
  for (const Span& s : t.spans) f.spans.push_back(&s);
  std::sort(f.spans.begin(), f.spans.end(), span_order::parent_first);
  const size_t n = f.spans.size();
  f.parent.assign(n, -1);
  f.root.assign(n, -1);
  f.exclusive.assign(n, 0);
  std::vector<int> stack;
  for (size_t i = 0; i < n; ++i) {
    const Span& s = *f.spans[i];
    while (!stack.empty()) {
      const Span& top = *f.spans[static_cast<size_t>(stack.back())];
      if (top.begin_ns <= s.begin_ns && s.end_ns <= top.end_ns) break;
      stack.pop_back();
    }
    const int p = stack.empty() ? -1 : stack.back();
    f.parent[i] = p;
    f.root[i] = p < 0 ? static_cast<int>(i) : f.root[static_cast<size_t>(p)];
    f.exclusive[i] = s.end_ns - s.begin_ns;
    if (p >= 0) f.exclusive[static_cast<size_t>(p)] -= s.end_ns - s.begin_ns;
    stack.push_back(static_cast<int>(i));
  }
  return f;
}

// Nearest-rank percentile of unsorted values.
double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(q / 100.0 * static_cast<double>(v.size()));
  const size_t i = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(v.size()))) - 1;
  return v[i];
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// Length of [b, e) covered by the union of sorted, disjoint intervals.
int64_t overlap(int64_t b, int64_t e, const std::vector<std::pair<int64_t, int64_t>>& with) {
  int64_t covered = 0;
  for (const auto& [wb, we] : with)
    covered += std::max<int64_t>(0, std::min(e, we) - std::max(b, wb));
  return covered;
}

struct StepSample {
  int worker = 0;
  int64_t step = 0;
  int64_t begin = 0, end = 0;
  std::array<double, kPhases> host{};  // ms; Phase::step: other
  std::array<double, kPhases> all{};   // ms, every thread
  std::map<int, double> input_per_thread;
  struct Run {
    int64_t end = 0, duration = 0;
    int thread = 0;
  };
  std::map<int, Run> replica_finish;  // replica -> its first run to finish (the one committed)
  int64_t comm_ns = 0, comm_hidden_ns = 0;
  std::vector<std::pair<int64_t, int64_t>> host_allreduce;
  double wall() const { return ms(end - begin); }
  double input_wait() const {
    double m = 0;
    for (const auto& [t, v] : input_per_thread) m = std::max(m, v);
    return m;
  }
};

struct WorkerAnalysis {
  int rank = 0;
  std::vector<StepSample> steps;
  std::vector<double> gaps;
  uint64_t task_runs = 0, backup_runs = 0, dropped = 0;
  int64_t checkpoints = 0, checkpoint_ns = 0;
  int threads = 0;
};

WorkerAnalysis analyse(const WorkerSpans& w) {
  WorkerAnalysis a;
  a.rank = w.rank;
  a.threads = static_cast<int>(w.threads.size());
  std::vector<Forest> forests;
  for (const auto& t : w.threads) forests.push_back(build_forest(t));
  // The host: the thread with the most steps.
  int host = -1;
  size_t most = 0;
  for (size_t t = 0; t < forests.size(); ++t) {
    size_t n = 0;
    for (const Span* s : forests[t].spans) n += s->phase == Phase::step;
    if (n > most) most = n, host = static_cast<int>(t);
  }
  std::vector<int> step_node;  // host node of each step, in order
  if (host >= 0) {
    const Forest& f = forests[static_cast<size_t>(host)];
    for (size_t i = 0; i < f.spans.size(); ++i) {
      if (f.spans[i]->phase == Phase::step && f.parent[i] < 0) {
        step_node.push_back(static_cast<int>(i));
        StepSample s;
        s.worker = w.rank;
        s.step = f.spans[i]->step;
        s.begin = f.spans[i]->begin_ns;
        s.end = f.spans[i]->end_ns;
        s.host[index(Phase::step)] = ms(f.exclusive[i]);
        a.steps.push_back(std::move(s));
      }
    }
  }
  for (size_t k = 1; k < a.steps.size(); ++k)
    a.gaps.push_back(ms(a.steps[k].begin - a.steps[k - 1].end));
  // The step whose interval holds time t (spans of every thread are placed by their begin).
  auto step_at = [&](int64_t t) -> StepSample* {
    auto it = std::upper_bound(a.steps.begin(), a.steps.end(), t,
                               [](int64_t v, const StepSample& s) { return v < s.begin; });
    if (it == a.steps.begin()) return nullptr;
    --it;
    return t <= it->end ? &*it : nullptr;
  };
  for (size_t t = 0; t < forests.size(); ++t) {
    const Forest& f = forests[t];
    const bool is_host = static_cast<int>(t) == host;
    a.dropped += w.threads[t].dropped;
    for (size_t i = 0; i < f.spans.size(); ++i) {
      const Span& s = *f.spans[i];
      const int p = f.parent[i];
      if (is_task(s.phase) && (p < 0 || !is_task(f.spans[static_cast<size_t>(p)]->phase))) {
        ++a.task_runs;
        a.backup_runs += s.backup;
      }
      if (s.phase == Phase::checkpoint) {
        ++a.checkpoints;
        a.checkpoint_ns += s.end_ns - s.begin_ns;
      }
      if (s.phase == Phase::step) continue;
      StepSample* step = step_at(s.begin_ns);
      if (step == nullptr) continue;
      step->all[index(s.phase)] += ms(f.exclusive[i]);
      if (s.phase == Phase::input)
        step->input_per_thread[static_cast<int>(t)] += ms(s.end_ns - s.begin_ns);
      if (s.phase == Phase::replica && s.replica >= 0) {
        const StepSample::Run run{s.end_ns, s.end_ns - s.begin_ns, static_cast<int>(t)};
        auto [it, fresh] = step->replica_finish.try_emplace(s.replica, run);
        if (!fresh && s.end_ns < it->second.end) it->second = run;
      }
      if (is_host) {
        const int r = f.root[i];
        if (r >= 0 && f.spans[static_cast<size_t>(r)]->phase == Phase::step)
          step->host[index(s.phase)] += ms(f.exclusive[i]);
        if (s.phase == Phase::all_reduce) step->host_allreduce.emplace_back(s.begin_ns, s.end_ns);
      }
    }
  }
  // The communication thread's all-reduces, less what the host spent waiting for them.
  for (size_t t = 0; t < forests.size(); ++t) {
    if (static_cast<int>(t) == host) continue;
    for (const Span* s : forests[t].spans) {
      if (s->phase != Phase::all_reduce) continue;
      StepSample* step = step_at(s->begin_ns);
      if (step == nullptr) continue;
      step->comm_ns += s->end_ns - s->begin_ns;
      step->comm_hidden_ns +=
          (s->end_ns - s->begin_ns) - overlap(s->begin_ns, s->end_ns, step->host_allreduce);
    }
  }
  return a;
}

}  // namespace

ProfileSummary summarize(const ProfileTrace& trace, const VerdictThresholds& th) {
  LOCKSTEP_CHECK(!trace.workers.empty(),
                 "summarize: expected a trace with at least one worker. Received an empty trace "
                 "(only the chief receives the gathered trace).");
  ProfileSummary out;
  out.workers = static_cast<int>(trace.workers.size());
  std::vector<WorkerAnalysis> workers;
  for (const WorkerSpans& w : trace.workers) workers.push_back(analyse(w));
  out.threads = workers.front().threads;

  std::vector<const StepSample*> samples;
  std::vector<double> gaps;
  for (const WorkerAnalysis& a : workers) {
    for (const StepSample& s : a.steps) samples.push_back(&s);
    gaps.insert(gaps.end(), a.gaps.begin(), a.gaps.end());
    out.task_runs += a.task_runs;
    out.backup_runs += a.backup_runs;
    out.dropped += a.dropped;
  }
  out.checkpoints = workers.front().checkpoints;
  out.checkpoint_ms = ms(workers.front().checkpoint_ns);
  out.steps = static_cast<int64_t>(samples.size());
  out.chief_steps = static_cast<int64_t>(workers.front().steps.size());
  out.between_steps_ms = mean(gaps);

  double wall_total = 0, input_total = 0, exposed_total = 0, hidden_total = 0, tasks_total = 0;
  std::vector<double> walls;
  for (const StepSample* s : samples) {
    walls.push_back(s->wall());
    wall_total += s->wall();
    input_total += s->input_wait();
    exposed_total += s->host[index(Phase::all_reduce)];
    hidden_total += ms(s->comm_hidden_ns);
    tasks_total += s->host[index(Phase::tasks)];
  }
  if (!samples.empty()) {
    out.first_step = samples.front()->step;
    out.last_step = samples.front()->step;
    for (const StepSample* s : samples) {
      out.first_step = std::min(out.first_step, s->step);
      out.last_step = std::max(out.last_step, s->step);
    }
    const double n = static_cast<double>(samples.size());
    out.step_mean_ms = wall_total / n;
    out.step_p50_ms = percentile(walls, 50);
    out.step_p99_ms = percentile(walls, 99);
    out.allreduce_exposed_ms = exposed_total / n;
    out.allreduce_hidden_ms = hidden_total / n;
    out.input_percent = wall_total > 0 ? 100.0 * input_total / wall_total : 0;
  }

  // The table, host view: the rows add up to the step time.
  const Phase rows[] = {Phase::input,        Phase::forward,    Phase::backward, Phase::replica,
                        Phase::local_reduce, Phase::all_reduce, Phase::update,   Phase::wait,
                        Phase::tasks,        Phase::checkpoint, Phase::step};
  for (Phase p : rows) {
    std::vector<double> v, all;
    for (const StepSample* s : samples) {
      v.push_back(s->host[index(p)]);
      all.push_back(s->all[index(p)]);
    }
    PhaseRow row;
    row.phase = p;
    row.name = p == Phase::step      ? "other (untraced)"
               : p == Phase::replica ? "replica (rest)"
               : p == Phase::tasks   ? "tasks (scheduling)"
                                     : std::string(profiler::phase_name(p));
    row.mean_ms = mean(v);
    row.p50_ms = percentile(v, 50);
    row.p99_ms = percentile(v, 99);
    double sum = 0;
    for (double x : v) sum += x;
    row.share_percent = wall_total > 0 ? 100.0 * sum / wall_total : 0;
    row.all_threads_ms = p == Phase::step ? 0 : mean(all);
    // Rows that only some programs have (no task pool in a custom loop, no checkpoint).
    if ((p == Phase::checkpoint || p == Phase::tasks) && sum == 0) continue;
    out.phases.push_back(row);
  }

  // Replicas: the committed run of each (the first to finish); the last to finish held the step.
  std::map<int, std::vector<double>> run_ms, lag;
  std::map<int, int64_t> last_count;
  int64_t replica_steps = 0;
  double replica_lag_total = 0;  // ms, summed over steps
  for (const StepSample* s : samples) {
    if (s->replica_finish.size() < 1) continue;
    ++replica_steps;
    int slowest = -1;
    for (const auto& [r, run] : s->replica_finish) {
      run_ms[r].push_back(ms(run.duration));
      if (slowest < 0 || run.end > s->replica_finish.at(slowest).end) slowest = r;
    }
    ++last_count[slowest];
    if (s->replica_finish.size() > 1) {
      // A replica whose run ended on another thread left that thread waiting for the slowest; one
      // that ran before it on its own thread did not (the thread went on to run it).
      const StepSample::Run& last = s->replica_finish.at(slowest);
      double waited = 0;
      for (const auto& [r, run] : s->replica_finish)
        if (r != slowest && run.thread != last.thread) waited += ms(last.end - run.end);
      lag[slowest].push_back(waited / static_cast<double>(s->replica_finish.size() - 1));
      replica_lag_total += lag[slowest].back();
    }
  }
  for (const auto& [r, v] : run_ms) {
    ReplicaStats rs;
    rs.replica = r;
    rs.mean_ms = mean(v);
    rs.last_percent = replica_steps ? 100.0 * static_cast<double>(last_count[r]) /
                                          static_cast<double>(replica_steps)
                                    : 0;
    rs.others_wait_ms = mean(lag[r]);
    out.replicas.push_back(rs);
  }

  // Workers: the one with the most time outside the all-reduce made the others wait in it.
  std::map<int64_t, std::vector<std::pair<int, double>>> by_step;  // step -> (worker, compute)
  for (const WorkerAnalysis& a : workers) {
    WorkerStats ws;
    ws.rank = a.rank;
    std::vector<double> wall, compute;
    for (const StepSample& s : a.steps) {
      wall.push_back(s.wall());
      compute.push_back(s.wall() - s.host[index(Phase::all_reduce)]);
      by_step[s.step].emplace_back(a.rank, compute.back());
    }
    ws.step_ms = mean(wall);
    ws.compute_ms = mean(compute);
    out.worker_stats.push_back(ws);
  }
  double worker_wait_total = 0;
  if (out.workers > 1) {
    std::map<int, std::vector<double>> wlag;
    std::map<int, int64_t> wlast;
    int64_t matched = 0;
    for (const auto& [step, v] : by_step) {
      if (static_cast<int>(v.size()) != out.workers) continue;
      ++matched;
      auto slowest = *std::max_element(
          v.begin(), v.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
      double waited = 0;
      for (const auto& [r, c] : v)
        if (r != slowest.first) waited += slowest.second - c;
      waited /= static_cast<double>(v.size() - 1);
      ++wlast[slowest.first];
      wlag[slowest.first].push_back(waited);
      worker_wait_total += waited * static_cast<double>(out.workers);
    }
    for (WorkerStats& ws : out.worker_stats) {
      ws.last_percent =
          matched ? 100.0 * static_cast<double>(wlast[ws.rank]) / static_cast<double>(matched) : 0;
      ws.others_wait_ms = mean(wlag[ws.rank]);
    }
  }

  // The chief's steps for the chart.
  for (const StepSample& s : workers.front().steps) {
    StepBreakdown b;
    b.step = s.step;
    b.wall_ms = s.wall();
    b.ms = s.host;
    out.timeline.push_back(b);
  }

  if (out.steps > 0) {
    const double wall = wall_total > 0 ? wall_total : 1;
    out.communication_percent = 100.0 * exposed_total / wall;
    out.replica_wait_ms =
        replica_lag_total / static_cast<double>(std::max<int64_t>(replica_steps, 1));
    out.replica_wait_percent = 100.0 * replica_lag_total / wall;
    out.worker_wait_percent = 100.0 * worker_wait_total / wall;
    out.scheduling_percent = 100.0 * tasks_total / wall;
  }
  out.verdicts = judge(out, th);
  return out;
}

}  // namespace lockstep::trace
