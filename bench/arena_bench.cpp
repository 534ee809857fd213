// What one flat, double-buffered arena for the weights and Adam's slots would buy the step's update
// (docs/architecture.md, "The flat arena: measured, not built"). Adam over the seed (mlp) and wide
// models' variables, on 1 and 2 task-pool threads, two ways with the same chunks (ChunkLayout), the
// same pool and the same rule (Optimizer::apply):
//   * PerVariable: the engine's own BufferedUpdate, as the step runs it. Each variable and slot is
//     its own allocation with its own next buffer, reached through the per-variable pointer tables
//     that begin_update fills, and flipped one by one in end_update.
//   * Arena: one allocation holding both buffers of the weights and slots, each laid end to end
//     like the gradients; a chunk's pointers are the arena's base plus its flat offset, and the
//     flip is one index. Above the engine's streaming threshold it writes through scratch with
//     non-temporal stores as the engine does.
// Paired runs both in one loop and reports the ratio arena / per-variable of wall and of CPU time
// (below 1: the arena is faster); PerVariable and Arena time each alone. BeginEnd times
// BufferedUpdate::begin_update + end_update alone, RuleBeginEnd the rule's part of them, which an
// arena keeps; the difference is the per-step bookkeeping an arena removes. Backups are turned off
// (no deadline) so that both measure the update, not stragglers.
//   nice -n -20 build/release/bench/arena_bench --benchmark_repetitions=7
//     --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
// (one command line).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "distribute/step/buffered_update.h"
#include "distribute/step/chunk_layout.h"
#include "distribute/step/task_pool.h"
#include "lockstep/core/random.h"
#include "lockstep/keras/optimizers.h"

namespace lockstep::distribute {
namespace {

struct ModelShapes {
  const char* name;
  std::vector<Shape> shapes;
};

// apps/models.cpp: each Dense layer's kernel and bias, in the step's order.
const ModelShapes kMlp{"mlp", {{784, 128}, {128}, {128, 10}, {10}}};
const ModelShapes kWide{"wide", {{784, 2048}, {2048}, {2048, 2048}, {2048}, {2048, 10}, {10}}};

std::vector<Variable> make_variables(const ModelShapes& m) {
  Generator gen(7);
  std::vector<Variable> vars;
  for (size_t i = 0; i < m.shapes.size(); ++i)
    vars.emplace_back(gen.uniform(m.shapes[i], -0.1, 0.1), std::string(m.name) + std::to_string(i));
  return vars;
}

std::vector<float> make_gradient(int64_t n) {
  Tensor g = Generator(8).uniform({n}, -0.01, 0.01);
  return {g.data<float>(), g.data<float>() + n};
}

std::unique_ptr<TaskPool> make_pool(int threads) {
  TaskPoolOptions o;
  o.num_threads = threads;
  o.backup_slack = std::chrono::hours(1);
  o.stall_window = std::chrono::microseconds(0);
  o.eager_caller_backups = false;
  o.machine_busy = [] { return false; };
  return std::make_unique<TaskPool>(std::move(o));
}

void copy_streaming(float* dst, const float* src, size_t n) {
#if defined(__x86_64__) || defined(__i386__)
  size_t i = 0;
  for (; i < n && (reinterpret_cast<uintptr_t>(dst + i) & 15) != 0; ++i) dst[i] = src[i];
  for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = src[i];
#else
  std::memcpy(dst, src, n * sizeof(float));
#endif
}

// The update over one arena: buffer b's region r (0: the weights, 1 + k: slot k) starts at
// (b * (1 + slots) + r) * stride floats, each region the variables end to end (ChunkLayout).
class ArenaUpdate final : public TaskPhase {
 public:
  ArenaUpdate(const ChunkLayout& layout, const std::vector<Variable>& vars, ElementwiseUpdate& rule,
              int threads)
      : layout_(layout), rule_(rule) {
    rule_.bind(vars);
    slots_ = rule_.slot_variables(0).size();
    stride_ = static_cast<size_t>((layout_.total() + 15) / 16 * 16);
    arena_ = Tensor::zeros({static_cast<int64_t>(2 * (1 + slots_) * stride_)});
    for (size_t i = 0; i < vars.size(); ++i) {
      std::memcpy(region(0, 0) + layout_.begin(i), vars[i].raw_value().data<float>(),
                  static_cast<size_t>(layout_.size(i)) * sizeof(float));
    }
    const size_t written = static_cast<size_t>(layout_.total()) * sizeof(float) * (1 + slots_);
    streaming_ = written > BufferedUpdate::streaming_threshold();
    scratch_.assign(static_cast<size_t>(threads),
                    std::vector<float>(static_cast<size_t>(layout_.chunk_size()) * (1 + slots_)));
  }

  void begin_update() { rule_.begin_update({}); }
  TaskPhase& phase_from_sum(const float* sum) {
    sum_ = sum;
    return *this;
  }
  void end_update() {
    current_ = 1 - current_;
    rule_.end_update();
  }

  int num_tasks() const override { return static_cast<int>(layout_.chunks().size()); }
  int kind() const override { return 1; }
  void* run(int task, int thread) override {
    const Chunk& c = layout_.chunks()[static_cast<size_t>(task)];
    const size_t n = static_cast<size_t>(c.n);
    float* scratch = scratch_[static_cast<size_t>(thread)].data();
    const float* in[kMaxSlots];
    float* out[kMaxSlots];
    for (size_t k = 0; k < slots_; ++k) {
      in[k] = region(current_, 1 + k) + c.flat;
      out[k] = streaming_ ? scratch + (1 + k) * n : region(1 - current_, 1 + k) + c.flat;
    }
    float* w_out = streaming_ ? scratch : region(1 - current_, 0) + c.flat;
    rule_.apply(c.var, c.offset, region(current_, 0) + c.flat, const_cast<float*>(sum_ + c.flat),
                {in, slots_}, w_out, {out, slots_}, n, {}, {});
    return scratch;
  }
  void commit(int task, void* result) override {
    if (!streaming_) return;
    const Chunk& c = layout_.chunks()[static_cast<size_t>(task)];
    const size_t n = static_cast<size_t>(c.n);
    const float* scratch = static_cast<const float*>(result);
    for (size_t r = 0; r < 1 + slots_; ++r)
      copy_streaming(region(1 - current_, r) + c.flat, scratch + r * n, n);
#if defined(__x86_64__) || defined(__i386__)
    _mm_sfence();
#endif
  }
  void discard(int, void*) override {}

  // Region r of the current buffer, the variables end to end.
  const float* current(size_t r) const {
    return region(current_, r);
  }

 private:
  static constexpr size_t kMaxSlots = 4;
  float* region(int buffer, size_t r) const {
    return arena_.data<float>() + (static_cast<size_t>(buffer) * (1 + slots_) + r) * stride_;
  }

  const ChunkLayout& layout_;
  ElementwiseUpdate& rule_;
  size_t slots_ = 0, stride_ = 0;
  Tensor arena_;
  int current_ = 0;
  bool streaming_ = false;
  const float* sum_ = nullptr;
  std::vector<std::vector<float>> scratch_;
};

void label(benchmark::State& state, const ChunkLayout& layout) {
  // Reads w, g, m, v and writes w, m, v: 28 bytes per element.
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * layout.total() * 28);
  state.counters["chunks"] = static_cast<double>(layout.chunks().size());
}

// One update per iteration, through the engine's layout (BufferedUpdate) or the arena's.
template <typename Update>
void update_steps(benchmark::State& state, const ModelShapes* m) {
  const int threads = static_cast<int>(state.range(0));
  auto pool = make_pool(threads);
  std::vector<Variable> vars = make_variables(*m);
  keras::optimizers::Adam adam;
  ChunkLayout layout(vars, threads);
  Update update(layout, vars, adam, pool->total_threads());
  std::vector<float> sum = make_gradient(layout.total());
  for (auto _ : state) {
    update.begin_update();
    pool->run(update.phase_from_sum(sum.data()));
    update.end_update();
  }
  pool->wait_for_runs_before(UINT64_MAX);
  label(state, layout);
}

void BM_PerVariable(benchmark::State& state, const ModelShapes* m) {
  update_steps<BufferedUpdate>(state, m);
}

void BM_Arena(benchmark::State& state, const ModelShapes* m) {
  update_steps<ArenaUpdate>(state, m);
}

// The engine's update with ordinary stores straight to the next buffers whatever the model's
// size (no streaming threshold): against BM_PerVariable, what the non-temporal path through
// scratch buys a model whose update outgrows the caches.
void BM_PerVariableNeverStreaming(benchmark::State& state, const ModelShapes* m) {
  const size_t saved = BufferedUpdate::streaming_threshold();
  BufferedUpdate::set_streaming_threshold(SIZE_MAX);
  update_steps<BufferedUpdate>(state, m);
  BufferedUpdate::set_streaming_threshold(saved);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double process_cpu_us() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) * 1e-3;
}

// Wall and process CPU time of one call, in microseconds.
struct Times {
  double wall = 0, cpu = 0;
};
template <typename F>
Times time_us(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = process_cpu_us();
  f();
  const double c1 = process_cpu_us();
  return {std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count(),
          c1 - c0};
}

// Both ways in one loop, one update each per iteration, in alternating order, each from its own
// copy of the gradient: on a shared machine the drift hits both alike. Reports the medians of the
// per-update wall times, and of the ratios arena / per-variable of wall and process CPU time over
// two consecutive iterations (one of each order: their geometric mean). Medians leave out the
// updates the scheduler interrupted; CPU time leaves out the time a thread waited for a core.
void BM_Paired(benchmark::State& state, const ModelShapes* m) {
  const int threads = static_cast<int>(state.range(0));
  auto pool = make_pool(threads);
  std::vector<Variable> vars_a = make_variables(*m), vars_b = make_variables(*m);
  keras::optimizers::Adam adam_a, adam_b;
  ChunkLayout layout(vars_a, threads);
  BufferedUpdate per_variable(layout, vars_a, adam_a, pool->total_threads());
  ArenaUpdate arena(layout, vars_b, adam_b, pool->total_threads());
  std::vector<float> sum_a = make_gradient(layout.total());
  std::vector<float> sum_b = sum_a;
  auto run_a = [&] {
    per_variable.begin_update();
    pool->run(per_variable.phase_from_sum(sum_a.data()));
    per_variable.end_update();
  };
  auto run_b = [&] {
    arena.begin_update();
    pool->run(arena.phase_from_sum(sum_b.data()));
    arena.end_update();
  };
  std::vector<double> a_us, b_us, wall_ratio, cpu_ratio;
  Times previous;
  for (auto _ : state) {
    const bool arena_first = a_us.size() % 2 == 1;
    Times a, b;
    if (arena_first) {
      b = time_us(run_b);
      a = time_us(run_a);
    } else {
      a = time_us(run_a);
      b = time_us(run_b);
    }
    a_us.push_back(a.wall);
    b_us.push_back(b.wall);
    const Times r{b.wall / a.wall, b.cpu / a.cpu};
    if (arena_first) {
      wall_ratio.push_back(std::sqrt(previous.wall * r.wall));
      cpu_ratio.push_back(std::sqrt(previous.cpu * r.cpu));
    }
    previous = r;
  }
  pool->wait_for_runs_before(UINT64_MAX);
  state.counters["per_variable_us"] = median(a_us);
  state.counters["arena_us"] = median(b_us);
  state.counters["arena/per_variable"] = wall_ratio.empty() ? 0.0 : median(wall_ratio);
  state.counters["cpu:arena/per_variable"] = cpu_ratio.empty() ? 0.0 : median(cpu_ratio);
}

// The per-variable bookkeeping alone: the pointer tables, the rule's begin and end, every
// variable's and slot's flip (the same buffers flip twice per iteration, so nothing is updated).
void BM_BeginEnd(benchmark::State& state, const ModelShapes* m) {
  std::vector<Variable> vars = make_variables(*m);
  keras::optimizers::Adam adam;
  ChunkLayout layout(vars, 1);
  BufferedUpdate update(layout, vars, adam, 1);
  for (auto _ : state) {
    update.begin_update();
    update.end_update();
  }
}

// What the arena keeps of that: the rule's own begin and end.
void BM_RuleBeginEnd(benchmark::State& state, const ModelShapes* m) {
  std::vector<Variable> vars = make_variables(*m);
  keras::optimizers::Adam adam;
  adam.bind(vars);
  for (auto _ : state) {
    adam.begin_update({});
    adam.end_update();
  }
}

void apply_common(benchmark::internal::Benchmark* b) {
  b->Arg(1)->Arg(2)->UseRealTime()->MeasureProcessCPUTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(BM_PerVariable, mlp, &kMlp)->Apply(apply_common);
BENCHMARK_CAPTURE(BM_Arena, mlp, &kMlp)->Apply(apply_common);
BENCHMARK_CAPTURE(BM_PerVariable, wide, &kWide)->Apply(apply_common);
BENCHMARK_CAPTURE(BM_Arena, wide, &kWide)->Apply(apply_common);
BENCHMARK_CAPTURE(BM_PerVariableNeverStreaming, wide, &kWide)->Apply(apply_common);
BENCHMARK_CAPTURE(BM_Paired, mlp, &kMlp)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK_CAPTURE(BM_Paired, wide, &kWide)->Arg(1)->Arg(2)->UseRealTime()->MinTime(3);
BENCHMARK_CAPTURE(BM_BeginEnd, mlp, &kMlp)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_BeginEnd, wide, &kWide)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RuleBeginEnd, mlp, &kMlp)->Unit(benchmark::kMicrosecond);

// Both ways compute the same bits: three updates on two threads, compared.
bool same_bits(const ModelShapes& m) {
  auto pool = make_pool(2);
  std::vector<Variable> vars = make_variables(m);
  ChunkLayout layout(vars, 2);
  std::vector<float> sum = make_gradient(layout.total());
  keras::optimizers::Adam adam_a, adam_b;
  ArenaUpdate arena(layout, vars, adam_a, pool->total_threads());
  BufferedUpdate update(layout, vars, adam_b, pool->total_threads());
  for (int step = 0; step < 3; ++step) {
    arena.begin_update();
    pool->run(arena.phase_from_sum(sum.data()));
    arena.end_update();
    update.begin_update();
    pool->run(update.phase_from_sum(sum.data()));
    update.end_update();
  }
  pool->wait_for_runs_before(UINT64_MAX);
  for (size_t i = 0; i < vars.size(); ++i) {
    const size_t bytes = static_cast<size_t>(layout.size(i)) * sizeof(float);
    if (std::memcmp(arena.current(0) + layout.begin(i), vars[i].raw_value().data<float>(), bytes))
      return false;
    const std::vector<Variable> slots = adam_b.slot_variables(i);
    for (size_t k = 0; k < slots.size(); ++k) {
      if (std::memcmp(arena.current(1 + k) + layout.begin(i), slots[k].raw_value().data<float>(),
                      bytes))
        return false;
    }
  }
  return true;
}

}  // namespace
}  // namespace lockstep::distribute

int main(int argc, char** argv) {
  using lockstep::distribute::same_bits;
  if (!same_bits(lockstep::distribute::kMlp) || !same_bits(lockstep::distribute::kWide)) {
    std::fprintf(stderr, "arena_bench: the two layouts computed different weights or slots\n");
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
