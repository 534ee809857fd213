#include "replicated_step.h"

#include <exception>

#include "deferred_sums.h"
#include "lockstep/core/profiler.h"
#include "lockstep/distribute/strategy.h"
#include "task_pool.h"

namespace lockstep::distribute {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A step that fails leaves nothing of any step running, so the caller may unwind what its
// replica functions refer to.
struct SettleIfThrown {
  ReplicaRuns& runs;
  int exceptions = std::uncaught_exceptions();
  ~SettleIfThrown() {
    if (std::uncaught_exceptions() > exceptions) runs.settle();
  }
};

}  // namespace

ReplicatedStep::ReplicatedStep(Strategy& strategy, std::vector<Variable> vars,
                               ElementwiseUpdate& update,
                               std::function<std::unique_ptr<RunState>()> make_state)
    : strategy_(strategy),
      layout_(vars, strategy.num_threads()),
      reducer_(layout_, strategy.cross_worker_shared(),
               strategy.cross_worker()
                   ? make_comm_hook(strategy.communication_options().gradient_dtype)
                   : nullptr,
               strategy.communication_options().bytes_per_pack),
      runs_(strategy, vars,
            {.extra_elements = DeferredSums::kCountElements,
             .make_state = std::move(make_state),
             .sink = &reducer_,
             .sink_counters = reducer_.num_buckets(),
             .on_replicas_done = [this] { end_replicas(); }}),
      update_(layout_, std::move(vars), update, strategy.task_pool().total_threads()),
      workers_(strategy.num_workers() > 1) {}

ReplicatedStep::~ReplicatedStep() {
  settle();
}

void ReplicatedStep::run(StepInput input, ReplicaFn fn, bool apply) {
  profiler::ScopedSpan trace(profiler::Phase::tasks);
  runs_.begin_step(std::move(input), std::move(fn));
  const SettleIfThrown settle_if_thrown{runs_};
  const bool norms = update_.rule().wants_gradient_norms();
  const bool one_sum = workers_ || norms;  // the update reads the sum as one buffer
  bool overlapped = false;
  if (apply && !one_sum && !runs_.gang()) {
    // The common step: the update chained to the replicas' phase; the previous step retires
    // before it rather than between the two.
    runs_.retire_previous_step();
    if (run_replicas(false, &update_.phase_summing(reducer_.terms(runs_.committed())))) {
      end_update();
      return count_step(replicas_ended_);
    }
    replicas_backed_up_ = false;  // they ran as a gang: one run each
  } else {
    overlapped = apply && overlaps_backward();
    if (overlapped) begin_overlap();
    const bool as_tasks = run_replicas(overlapped, nullptr);
    overlapped = as_tasks && overlapped;
    replicas_backed_up_ = as_tasks && strategy_.task_pool().last_phase_backed_up();
  }
  const auto t0 = Clock::now();
  runs_.retire_previous_step();
  if (!apply) {
    accumulate();
  } else if (one_sum) {
    update_from(reduce(overlapped), norms);
  } else {
    update_summing();
  }
  count_step(t0);
}

bool ReplicatedStep::run_replicas(bool overlap, TaskPhase* then) {
  if (!runs_.gang()) {
    if (runs_.run_as_tasks(overlap, then)) return true;
    if (overlap) reducer_.cancel_overlap();
  }
  runs_.run_as_gang();
  return false;
}

bool ReplicatedStep::update_in_place() const {
  switch (BufferedUpdate::in_place_mode()) {
    case BufferedUpdate::InPlace::never:
      return false;
    case BufferedUpdate::InPlace::when_quiet: {
      // On a busy machine a thread can lose its CPU mid-chunk for a scheduler slice: there the
      // chunks need their backups — unless one thread runs every task, which none can back up.
      const TaskPool& pool = strategy_.task_pool();
      if (pool.total_threads() > 1 && pool.spin_before_sleep().count() == 0) return false;
      break;
    }
    case BufferedUpdate::InPlace::always:
      break;
  }
  return !replicas_backed_up_;
}

bool ReplicatedStep::overlaps_backward() const {
  return !runs_.gang() && runs_.num_local() == 1 && reducer_.can_overlap();
}

void ReplicatedStep::begin_overlap() {
  runs_.wait_for_earlier_steps();  // the buckets write the sum during the replicas' phase
  reducer_.begin_overlap();
}

void ReplicatedStep::end_replicas() {
  replicas_ended_ = Clock::now();
  replicas_backed_up_ = strategy_.task_pool().last_phase_backed_up();
  runs_.commit_replica_state();
  begin_summed_update();
}

void ReplicatedStep::begin_summed_update() {
  DeferredSums::apply(runs_.committed(), nullptr);
  update_.begin_update({}, update_in_place());
}

float* ReplicatedStep::reduce(bool overlapped) {
  Communicator* cross = strategy_.cross_worker();
  if (overlapped) {
    const auto tc = Clock::now();
    float* sum = reducer_.finish_overlap();
    stats_.cross_worker_seconds += seconds_since(tc);
    DeferredSums::apply(runs_.committed(), cross);
    return sum;
  }
  // A step whose gradients cross workers in float32 carries the deferred sums' count check in
  // that all-reduce (DeferredSums::count_from_sums): one collective per step fewer.
  const bool carry = workers_ && reducer_.wire_dtype() == DType::float32;
  if (!carry) DeferredSums::apply(runs_.committed(), cross);
  float* sum = reducer_.local_sum(strategy_.task_pool(), runs_.committed());
  if (!workers_) return sum;
  const auto tc = Clock::now();
  float* counts = sum + layout_.total();
  if (carry) {
    const auto n = static_cast<float>(DeferredSums::count(runs_.committed()));
    counts[0] = n;
    counts[1] = n * n;
  }
  reducer_.all_reduce(sum, carry ? DeferredSums::kCountElements : 0);
  stats_.cross_worker_seconds += seconds_since(tc);
  if (carry) DeferredSums::apply(runs_.committed(), cross, counts);
  return sum;
}

void ReplicatedStep::accumulate() {
  DeferredSums::apply(runs_.committed(), strategy_.cross_worker());
  reducer_.accumulate(strategy_.task_pool(), runs_.committed());
}

void ReplicatedStep::update_summing() {
  begin_summed_update();
  strategy_.task_pool().run(update_.phase_summing(reducer_.terms(runs_.committed())));
  end_update();
}

void ReplicatedStep::update_from(float* sum, bool norms) {
  update_.begin_update(norms ? reducer_.squared_norms(sum) : std::vector<double>{},
                       update_in_place());
  strategy_.task_pool().run(update_.phase_from_sum(sum));
  end_update();
}

void ReplicatedStep::end_update() {
  if (update_.in_place()) stats_.in_place_updates += 1;
  update_.end_update();
  reducer_.clear_accumulated();
}

void ReplicatedStep::count_step(Clock::time_point since) {
  stats_.steps += 1;
  stats_.local_seconds += seconds_since(since);
  stats_.bytes_per_step = static_cast<size_t>(layout_.total()) *
                          (workers_ ? dtype_size(reducer_.wire_dtype()) : sizeof(float));
}

void ReplicatedStep::settle() {
  runs_.settle();
}

SyncStats ReplicatedStep::stats() const {
  SyncStats s = stats_;
  TaskPoolStats p = strategy_.task_pool().stats();
  s.backup_runs = p.backups;
  s.backup_wins = p.backup_wins;
  s.backup_publishes = update_.backup_publishes();
  s.bfloat16_gradient_chunks = update_.bfloat16_gradient_chunks();
  return s;
}

}  // namespace lockstep::distribute
