// All-reduce between MPI processes, the cross-worker path of multi-worker training:
//   mpirun --oversubscribe --bind-to none -np 2 build/release/bench/mpi_allreduce_bench
// (as root, with OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 in the environment)
// (add `--mca btl_vader_single_copy_mechanism cma` to compare with Open MPI's own default
// transport, which Lockstep overrides; see docs/distributed.md "Transport default"). Rows:
// MpiCommunicator::all_reduce (what training calls: MPI_Iallreduce polled for a deadline), raw
// blocking MPI_Allreduce (the reference), and BackgroundReducer (the same collective handed to a
// communication thread). Counts: the seed model's gradient (101,770 float32) and the wide model's
// (5,824,522). Counter floor_us: the ring all-reduce's 2 (n - 1) / n * bytes at 13 GB/s
// (docs/machine.md single-core copy: on one host every transfer is a memory copy).
//
// Every rank must run the same iterations in the same order (they are collectives), so the
// iteration counts are fixed instead of Google Benchmark's adaptive ones; only rank 0 prints.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <memory>
#include <vector>

#include "distribute/collectives/mpi_communicator.h"
#include "lockstep/distribute/background_reducer.h"

namespace {

using lockstep::DType;
using namespace lockstep::distribute;

constexpr double kCopyBandwidth = 13e9;  // bytes/s, docs/machine.md single-core copy

std::shared_ptr<Communicator> g_comm;

void add_counters(benchmark::State& state, size_t count) {
  const int n = g_comm->size();
  const double bytes = static_cast<double>(count) * sizeof(float);
  const double ring = n > 1 ? 2.0 * (n - 1) / n * bytes : 0.0;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  state.counters["floor_us"] = ring / kCopyBandwidth * 1e6;
  state.counters["ranks"] = n;
}

void BM_MpiCommunicatorAllReduce(benchmark::State& state) {
  const auto count = static_cast<size_t>(state.range(0));
  std::vector<float> buf(count, 0.0f);  // zeros: sums stay finite over iterations
  g_comm->barrier();
  for (auto _ : state) g_comm->all_reduce(buf.data(), count, DType::float32, ReduceOp::SUM);
  add_counters(state, count);
}

void BM_RawMpiAllreduceBlocking(benchmark::State& state) {
  const auto count = static_cast<size_t>(state.range(0));
  std::vector<float> buf(count, 0.0f);
  MPI_Barrier(MPI_COMM_WORLD);
  for (auto _ : state) {
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  }
  add_counters(state, count);
}

void BM_BackgroundReducer(benchmark::State& state) {
  const auto count = static_cast<size_t>(state.range(0));
  std::vector<float> buf(count, 0.0f);
  BackgroundReducer reducer(g_comm);
  g_comm->barrier();
  for (auto _ : state) {
    reducer.enqueue(buf.data(), count, DType::float32, ReduceOp::SUM);
    reducer.wait();
  }
  add_counters(state, count);
}

BENCHMARK(BM_MpiCommunicatorAllReduce)->Arg(101770)->Iterations(2000)->UseRealTime();
BENCHMARK(BM_RawMpiAllreduceBlocking)->Arg(101770)->Iterations(2000)->UseRealTime();
BENCHMARK(BM_BackgroundReducer)->Arg(101770)->Iterations(2000)->UseRealTime();
BENCHMARK(BM_MpiCommunicatorAllReduce)->Arg(5824522)->Iterations(30)->UseRealTime();
BENCHMARK(BM_RawMpiAllreduceBlocking)->Arg(5824522)->Iterations(30)->UseRealTime();
BENCHMARK(BM_BackgroundReducer)->Arg(5824522)->Iterations(30)->UseRealTime();

// Ranks other than 0 run the same benchmarks silently.
class Silent : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  MpiContext& mpi = mpi_initialize(&argc, &argv);
  g_comm = mpi.world({.timeout_seconds = 120});
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (mpi.world_rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    Silent silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  benchmark::Shutdown();
  g_comm.reset();
  mpi.finalize();
  return 0;
}
