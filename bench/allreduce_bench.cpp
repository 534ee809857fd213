// Shared-memory all-reduce between replica threads, each pinned to its own core (as a strategy
// pins them). Reported per run:
//   bytes_per_second  the all-reduced buffer per second (algorithm bandwidth)
//   busbw             2 (n - 1) / n * bytes / time: the bytes a ring all-reduce must move per rank,
//                     the figure NCCL reports; comparable across group sizes
//   floor_us          that ring traffic at 24 GB/s (this machine's 2-core copy bandwidth,
//                     docs/distributed.md); time / floor_us is how far from memory bandwidth we are
// Buffers of 101,770 float32 (the seed model's gradient, 407 KB) fit in L2, so they can beat the
// DRAM floor; the large sizes cannot.
#include <benchmark/benchmark.h>

#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "lockstep/core/cpu_cores.h"
#include "lockstep/core/tensor.h"
#include "lockstep/distribute/collective.h"
#include "lockstep/distribute/shared_memory_group.h"

namespace {

using lockstep::DType;
using lockstep::Tensor;
using lockstep::distribute::ReduceOp;
using lockstep::distribute::SharedMemoryGroup;

constexpr double kTwoCoreBandwidth = 24e9;  // bytes/s, docs/machine.md

SharedMemoryGroup& group_of(int n) {
  // Built before the benchmark threads start (see main), so no thread races to create one.
  static SharedMemoryGroup g1(1), g2(2), g4(4), g8(8);
  switch (n) {
    case 1:
      return g1;
    case 2:
      return g2;
    case 4:
      return g4;
    default:
      return g8;
  }
}

void pin_to_core(int index) {
  const std::vector<int> cores = lockstep::available_cores();
  lockstep::pin_current_thread({cores[static_cast<size_t>(index) % cores.size()]});
}

void BM_SharedMemoryAllReduce(benchmark::State& state) {
  const int n = state.threads();
  const int rank = state.thread_index();
  const auto count = static_cast<int64_t>(state.range(0));
  pin_to_core(rank);
  auto comm = group_of(n).communicator(rank);
  // Zeros: sums stay zero, so no denormals or infinities creep in over iterations.
  Tensor grad = Tensor::zeros({count});
  comm->barrier();
  for (auto _ : state) {
    comm->all_reduce(grad, ReduceOp::SUM);
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(count) * 4;
  const double ring = n > 1 ? 2.0 * (n - 1) / n * bytes : 0.0;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  state.counters["busbw"] = benchmark::Counter(
      ring * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kAvgThreads, benchmark::Counter::kIs1000);
  state.counters["floor_us"] =
      benchmark::Counter(ring / kTwoCoreBandwidth * 1e6, benchmark::Counter::kAvgThreads);
}

BENCHMARK(BM_SharedMemoryAllReduce)
    ->Arg(101770)
    ->Arg(1 << 20)
    ->Arg(1 << 24)
    ->Threads(2)
    ->UseRealTime();
// Oversubscribed (more ranks than cores on this machine): must still make steady progress.
BENCHMARK(BM_SharedMemoryAllReduce)->Arg(101770)->Threads(4)->Threads(8)->UseRealTime();

void BM_SharedMemoryBarrier(benchmark::State& state) {
  const int rank = state.thread_index();
  pin_to_core(rank);
  auto comm = group_of(state.threads()).communicator(rank);
  for (auto _ : state) comm->barrier();
}
BENCHMARK(BM_SharedMemoryBarrier)->Threads(2)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  group_of(1);  // construct the static groups before any benchmark thread exists
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
