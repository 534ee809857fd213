// The cost of one span site of the step profiler (lockstep/core/profiler.h), off and on: what a
// training step pays per span (about 60 per thread and step for the seed model). Off is one
// relaxed atomic load; on adds two steady_clock reads and a 32-byte write into the thread's
// buffer (large enough here never to fill).
//
//   build/release/bench/profiler_bench
#include <benchmark/benchmark.h>

#include "lockstep/core/profiler.h"

namespace {

using lockstep::profiler::Phase;
using lockstep::profiler::ScopedSpan;

void BM_SpanOff(benchmark::State& state) {
  for (auto _ : state) {
    ScopedSpan span(Phase::update);
    benchmark::DoNotOptimize(&span);
  }
}
BENCHMARK(BM_SpanOff);

void BM_SpanOn(benchmark::State& state) {
  lockstep::profiler::start({.spans_per_thread = size_t{1} << 22});
  for (auto _ : state) {
    ScopedSpan span(Phase::update);
    benchmark::DoNotOptimize(&span);
  }
  lockstep::profiler::stop();
  state.counters["dropped"] = static_cast<double>(lockstep::profiler::collect().at(0).dropped);
}
BENCHMARK(BM_SpanOn)->Iterations(1 << 22);

}  // namespace

BENCHMARK_MAIN();
