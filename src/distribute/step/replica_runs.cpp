#include "replica_runs.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>

#include "core/shared_blocks.h"
#include "lockstep/core/denormals.h"
#include "lockstep/core/error.h"
#include "lockstep/core/profiler.h"
#include "lockstep/core/task_cancellation.h"
#include "lockstep/distribute/strategy.h"
#include "task_pool.h"

namespace lockstep::distribute {

namespace {

// Phases stay referenced by the pool's record of them until it is reused, which the pool does
// only once nothing runs in it; this many later phases make sure of that.
constexpr uint64_t kPhaseRetention = 8;

// How long the step's end watches a staging of the next input under way before sleeping on it,
// on any machine: about twice the longest staging of a seed-model batch measured.
constexpr std::chrono::microseconds kStagingWatch{60};

}  // namespace

// ---- ReplicaRun

void ReplicaRun::reset(int replica, bool overlap) {
  replica_ = replica;
  overlap_ = overlap;
  std::fill(sink_counts_.begin(), sink_counts_.end(), 0);
  std::fill(defined_.begin(), defined_.end(), 0);
  locals_.clear();
  deferred_.clear();
}

const std::vector<Tensor>& ReplicaRun::gradient_buffers() const {
  if (bf16_views_.empty()) return views_;
  for (size_t i = 0; i < views_.size(); ++i) {
    dest_[i] = (*vars_)[i].gradient_dtype() == DType::bfloat16 ? bf16_views_[i] : views_[i];
  }
  return dest_;
}

void ReplicaRun::set_gradients(const std::vector<Tensor>& grads) {
  if (grads.size() != views_.size()) {
    throw InvalidArgument("ReplicaRun::set_gradients: expected one gradient per variable (" +
                          std::to_string(views_.size()) + "). Received " +
                          std::to_string(grads.size()) + ".");
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined()) {
      defined_[i] = 0;
      continue;
    }
    if ((g.dtype() != DType::float32 && g.dtype() != DType::bfloat16) ||
        !(g.shape() == views_[i].shape())) {
      throw InvalidArgument("ReplicaRun::set_gradients: gradient " + std::to_string(i) +
                            " must be float32 or bfloat16 shaped like its variable: expected " +
                            views_[i].describe() + ". Received: " + g.describe() + ".");
    }
    if (g.dtype() == DType::bfloat16 && !bf16_views_.empty()) {
      if (g.raw_data() != bf16_views_[i].raw_data()) bf16_views_[i].copy_from(g);
      stored_[i] = DType::bfloat16;
    } else {
      if (g.raw_data() != views_[i].raw_data())
        views_[i].copy_from(g.dtype() == DType::float32 ? g : g.to(DType::float32));
      stored_[i] = DType::float32;
    }
    defined_[i] = 1;
  }
}

bool ReplicaRun::float32_gradients() const {
  for (size_t i = 0; i < stored_.size(); ++i)
    if (defined_[i] != 0 && stored_[i] != DType::float32) return false;
  return true;
}

void ReplicaRun::gradient_ready(size_t variable, const Tensor& gradient) {
  if (!overlap_) return;
  if (gradient.defined() && gradient.raw_data() != views_[variable].raw_data()) {
    views_[variable].copy_from(gradient.dtype() == DType::float32 ? gradient
                                                                  : gradient.to(DType::float32));
  }
  stored_[variable] = DType::float32;
  defined_[variable] = gradient.defined() ? 1 : 0;
  if (sink_ != nullptr) sink_->gradient_ready(*this, variable);
}

bool ReplicaRun::has_any_gradient() const {
  return std::find(defined_.begin(), defined_.end(), 1) != defined_.end();
}

bool ReplicaRun::has_every_gradient() const {
  return std::find(defined_.begin(), defined_.end(), 0) == defined_.end();
}

void ReplicaRun::commit() {
  for (Local& l : locals_) l.commit();
  locals_.clear();
}

void* ReplicaRun::find_local(const void* shared) const {
  for (const Local& l : locals_)
    if (l.shared == shared) return l.copy.get();
  return nullptr;
}

void ReplicaRun::add_local(const void* shared, std::shared_ptr<void> copy,
                           std::function<void()> commit) {
  locals_.push_back({shared, std::move(copy), std::move(commit)});
}

// ---- the replicas' phase: one per step, holding the step's function and input

class ReplicaRuns::Phase : public TaskPhase {
 public:
  Phase(ReplicaRuns& runs, StepInput input, ReplicaFn fn)
      : runs_(runs), input_(std::move(input)), fn_(std::move(fn)) {
    input_.begin(runs_.num_local_);
  }
  int num_tasks() const override { return runs_.num_local_; }
  int kind() const override { return 0; }
  profiler::Phase trace_phase() const override { return profiler::Phase::replica; }
  int trace_replica(int task) const override { return task; }
  void* run(int replica, int thread) override {
    ReplicaRun* run = runs_.acquire();
    // Blocks the run's kernels split their work into are left for idle threads to help with,
    // while the machine has a spare core: on a busy one a helper that loses its CPU mid-block
    // would hold this run up, and the threads have no time to spare anyway.
    const bool share = runs_.strategy_.task_pool().spin_before_sleep().count() > 0;
    const BlockBoardScope board(share ? &runs_.boards_[static_cast<size_t>(thread)] : nullptr);
    try {
      check_task_cancelled();
      run->reset(replica, overlap_);
      ReplicaContext ctx(runs_.strategy_, replica, nullptr, runs_.strategy_.cross_worker(), run);
      ReplicaContextScope context(&ctx);
      Strategy::Scope scope(runs_.strategy_);
      fn_(ctx, *run, input_.get(replica));
    } catch (...) {
      runs_.release(run);
      throw;
    }
    return run;
  }
  void commit(int replica, void* result) override {
    runs_.committed_[runs_.parity_][static_cast<size_t>(replica)] =
        static_cast<ReplicaRun*>(result);
  }
  void discard(int, void* result) override { runs_.release(static_cast<ReplicaRun*>(result)); }
  void phase_done() override {
    if (chained_ && runs_.options_.on_replicas_done) runs_.options_.on_replicas_done();
  }
  // A thread done with its replica while another's still runs (or the update's last chunks do)
  // pulls a later step's input ahead, which the step would otherwise pull at its start: first
  // that of a replica still running, whose thread holds the step up — or, on a quiet machine whose
  // cores read each other's lines at a cost (TaskPoolOptions::idle_work_prefers_own_task), that of
  // its own replica, which it runs again next step from its own core's cache.
  // Before that it helps a run still under way with the blocks it posted (shared_blocks.h).
  bool idle_work(int preferred) override { return runs_.help_runs() || input_.stage(preferred); }

  // Before the pool runs the phase: how, and its sequence number there.
  void start(bool overlap, bool chained, uint64_t sequence) {
    overlap_ = overlap;
    chained_ = chained;
    sequence_ = sequence;
  }
  // Every replica at once, one thread each (Strategy::run_on_replicas).
  void run_gang(ReplicaContext& ctx, ReplicaRun& run) {
    fn_(ctx, run, input_.get(ctx.local_replica_id()));
  }
  // The step is over: no pull starts any more (a staging under way ends first). A staging takes
  // tens of microseconds, and the step's caller, asleep on one, waits for its CPU to come back:
  // on a busy machine, behind the other process's slice. So it watches for the end for a while
  // even there, where the pool's own waits sleep at once (docs/performance.md, "Measured design
  // choices").
  void close() {
    input_.close(std::max(runs_.strategy_.task_pool().spin_before_sleep(), kStagingWatch));
  }
  // The step retired: no run of it can execute.
  void release() {
    input_ = StepInput();
    fn_ = nullptr;
  }
  // Whether the pool may still refer to it once `now` phases have run.
  bool in_use(uint64_t now) const { return sequence_ != 0 && sequence_ + kPhaseRetention > now; }

 private:
  ReplicaRuns& runs_;
  StepInput input_;
  ReplicaFn fn_;
  // The step's, fixed for every run (a late backup run may start after the step).
  bool overlap_ = false;
  bool chained_ = false;
  uint64_t sequence_ = 0;  // in the pool (0: not run there)
};

// ---- ReplicaRuns

ReplicaRuns::ReplicaRuns(Strategy& strategy, const std::vector<Variable>& vars, Options options)
    : strategy_(strategy),
      vars_(vars),
      options_(std::move(options)),
      num_local_(strategy.num_local_replicas()) {
  bf16_gradients_ = num_local_ > 1 && bfloat16_gradient_buffers();
  for (const Variable& v : vars) {
    shapes_.push_back(v.shape());
    total_ += v.num_elements();
  }
  TaskPool& pool = strategy_.task_pool();
  num_boards_ = static_cast<size_t>(pool.total_threads());
  boards_ = std::make_unique<BlockBoard[]>(num_boards_);
  for (size_t i = 0; i < num_boards_; ++i) boards_[i].set_on_post([&pool] { pool.wake_idle(); });
  committed_[0].assign(static_cast<size_t>(num_local_), nullptr);
  committed_[1].assign(static_cast<size_t>(num_local_), nullptr);
}

namespace {
std::atomic<bool> g_bf16_gradient_buffers{true};
}  // namespace

void ReplicaRuns::set_bfloat16_gradient_buffers(bool on) {
  g_bf16_gradient_buffers.store(on, std::memory_order_relaxed);
}

bool ReplicaRuns::bfloat16_gradient_buffers() {
  return g_bf16_gradient_buffers.load(std::memory_order_relaxed);
}

bool ReplicaRuns::help_runs() {
  for (size_t i = 0; i < num_boards_; ++i) {
    BlockBoard& board = boards_[i];
    if (!board.has_blocks()) continue;
    // The blocks compute what the posting run would: in its floating-point mode.
    const ScopedFlushDenormal flush;
    profiler::ScopedSpan trace(profiler::Phase::backward);
    if (board.help()) return true;
  }
  return false;
}

ReplicaRuns::~ReplicaRuns() {
  settle();
}

void ReplicaRuns::begin_step(StepInput input, ReplicaFn fn) {
  auto phase = std::make_unique<Phase>(*this, std::move(input), std::move(fn));
  step_first_phase_ = strategy_.task_pool().stats().phases + 1;
  parity_ = 1 - parity_;
  previous_ = current_;
  current_ = phase.get();
  // In place of a phase the pool no longer refers to, of a step that retired.
  const uint64_t now = strategy_.task_pool().stats().phases;
  for (auto& p : phases_) {
    if (p.get() != previous_ && !p->in_use(now)) {
      p = std::move(phase);
      return;
    }
  }
  phases_.push_back(std::move(phase));
}

bool ReplicaRuns::run_as_tasks(bool overlap, TaskPhase* then) {
  TaskPool& pool = strategy_.task_pool();
  std::vector<ReplicaRun*>& committed = committed_[parity_];
  std::fill(committed.begin(), committed.end(), nullptr);
  Phase& phase = *current_;
  phase.start(overlap, then != nullptr, pool.stats().phases + 1);
  try {
    if (then != nullptr) {
      pool.run(phase, *then);
    } else {
      pool.run(phase);
    }
  } catch (const CollectiveInTask&) {
    for (ReplicaRun*& r : committed) {
      if (r) release(r);
      r = nullptr;
    }
    gang_ = true;
    return false;
  } catch (...) {
    phase.close();
    throw;
  }
  phase.close();
  if (then == nullptr) commit_replica_state();
  return true;
}

void ReplicaRuns::run_as_gang() {
  gang_ = true;
  std::vector<ReplicaRun*>& committed = committed_[parity_];
  std::fill(committed.begin(), committed.end(), nullptr);
  Phase& phase = *current_;
  struct Close {
    Phase& phase;
    ~Close() { phase.close(); }
  } close{phase};
  strategy_.run_on_replicas([&](ReplicaContext& ctx) {
    const int r = ctx.local_replica_id();
    profiler::ScopedSpan trace(profiler::Phase::replica, r);
    ReplicaRun* run = acquire();
    run->reset(r, false);
    ReplicaContext mine(strategy_, r, &ctx.local_communicator(), strategy_.cross_worker(), run);
    ReplicaContextScope context(&mine);
    try {
      phase.run_gang(mine, *run);
    } catch (...) {
      release(run);
      throw;
    }
    committed[static_cast<size_t>(r)] = run;
  });
  commit_replica_state();
}

void ReplicaRuns::commit_replica_state() {
  for (ReplicaRun* r : committed_[parity_]) r->commit();
}

void ReplicaRuns::wait_for_earlier_steps() {
  strategy_.task_pool().wait_for_runs_before(step_first_phase_);
}

void ReplicaRuns::retire_previous_step() {
  wait_for_earlier_steps();
  for (ReplicaRun*& r : committed_[1 - parity_]) {
    if (r) release(r);
    r = nullptr;
  }
  if (previous_ != nullptr) previous_->release();
}

void ReplicaRuns::settle() {
  strategy_.task_pool().wait_for_runs_before(UINT64_MAX);
  for (auto& p : phases_) p->release();
}

RunState* ReplicaRuns::committed_state(int replica) const {
  ReplicaRun* r = committed_[parity_].at(static_cast<size_t>(replica));
  return r ? r->state() : nullptr;
}

ReplicaRun* ReplicaRuns::acquire() {
  std::lock_guard lock(slots_mu_);
  if (free_.empty()) {
    auto r = std::make_unique<ReplicaRun>();
    r->flat_ = Tensor({total_ + options_.extra_elements}, DType::float32);
    int64_t off = 0;
    for (const Shape& s : shapes_) {
      r->views_.push_back(r->flat_.slice(off, off + s.num_elements()).reshape(s));
      if (bf16_gradients_) r->bf16_views_.push_back(r->views_.back().view_as(DType::bfloat16, s));
      off += s.num_elements();
    }
    r->vars_ = &vars_;
    r->dest_ = r->views_;
    r->stored_.assign(shapes_.size(), DType::float32);
    r->defined_.assign(shapes_.size(), 0);
    r->sink_ = options_.sink;
    r->sink_counts_.assign(options_.sink_counters, 0);
    if (options_.make_state) r->state_ = options_.make_state();
    free_.push_back(r.get());
    slots_.push_back(std::move(r));
  }
  ReplicaRun* r = free_.back();
  free_.pop_back();
  return r;
}

void ReplicaRuns::release(ReplicaRun* run) {
  std::lock_guard lock(slots_mu_);
  free_.push_back(run);
}

}  // namespace lockstep::distribute
