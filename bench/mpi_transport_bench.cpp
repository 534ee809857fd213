// The inputs of the cost model in docs/distributed.md ("Cost model for scale"): latency and
// bandwidth of the path between two MPI processes, and the all-reduce a training step makes over
// it. Run it with 2 ranks on one host (Open MPI's shared-memory transport) and with one rank on
// each of two hosts (TCP):
//   mpirun -np 2 --bind-to none build/release/bench/mpi_transport_bench
//   bench/multihost_transport.sh build/release/bench/mpi_transport_bench   # two simulated hosts
// (as root, with OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 in the environment).
//
// Rows (rank 0 prints them; median and best of `--repetitions` samples, 200 by default, a tenth of
// that for messages above 1 MiB; every sample is timed on its own):
//   * ping-pong of B bytes (MPI_Send / MPI_Recv, blocking: the transport alone): one-way time
//     = round trip / 2 (with the skew of the barrier before it). The 8-byte row is the latency
//     alpha; for large B, B / one-way is the bandwidth beta. The model t(B) = alpha + B / beta is
//     fitted on the best rounds of the 8 B and 64 MiB rows.
//   * all-reduce of the seed model's gradient (101,770 float32) and of the wide model's
//     (5,824,522) through MpiCommunicator, as training calls it (polled, no spinning), next to
//     what the fitted alpha-beta model predicts for 2 ranks: 2 (alpha + B/2 / beta), the two
//     steps of a ring (reduce-scatter and all-gather of halves).
// Output is a table and, with `--json FILE`, the same numbers as JSON.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "distribute/collectives/mpi_communicator.h"

namespace {

using lockstep::DType;
using namespace lockstep::distribute;
using Clock = std::chrono::steady_clock;

// Median and best of repeated timings: on a shared machine the best round is the closer estimate
// of what the transport can do, the median of what a job gets.
struct Timing {
  double median = 0;
  double best = 0;
};

Timing summarise(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front()};
}

// One-way times (seconds) of `samples` B-byte ping-pongs between ranks 0 and 1, each timed on its
// own: on a shared machine the best sample is one where neither rank was descheduled.
Timing ping_pong(size_t bytes, int samples) {
  std::vector<char> buf(std::max<size_t>(bytes, 1), 1);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int n = static_cast<int>(bytes);
  std::vector<double> times;
  for (int i = -2; i < samples; ++i) {  // two warm-ups (connections, pages)
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = Clock::now();
    if (rank == 0) {
      MPI_Send(buf.data(), n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(buf.data(), n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Recv(buf.data(), n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf.data(), n, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
    }
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (i >= 0) times.push_back(s / 2);
  }
  return summarise(times);
}

// Seconds of `samples` all-reduces of `count` float32 through the communicator, each timed.
Timing all_reduce(Communicator& comm, size_t count, int samples) {
  std::vector<float> buf(count, 0.0f);  // zeros: sums stay finite
  std::vector<double> times;
  for (int i = -2; i < samples; ++i) {
    comm.barrier();
    const auto start = Clock::now();
    comm.all_reduce(buf.data(), count, DType::float32, ReduceOp::SUM);
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (i >= 0) times.push_back(s);
  }
  return summarise(times);
}

}  // namespace

int main(int argc, char** argv) {
  MpiContext& mpi = mpi_initialize(&argc, &argv);
  int repetitions = 200;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repetitions") == 0 && i + 1 < argc) {
      repetitions = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: mpirun -np 2 %s [--repetitions N] [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  if (mpi.world_size() != 2) {
    std::fprintf(stderr, "mpi_transport_bench: expected 2 ranks (mpirun -np 2). Received: %d.\n",
                 mpi.world_size());
    return 2;
  }
  const std::vector<std::string> hosts = mpi.world_hosts();
  const bool one_host = hosts[0] == hosts[1];
  const bool print = mpi.world_rank() == 0;

  struct Row {
    size_t bytes;
    Timing one_way;
  };
  std::vector<Row> rows;
  for (size_t bytes : {size_t{8}, size_t{1} << 10, size_t{64} << 10, size_t{1} << 20,
                       size_t{16} << 20, size_t{64} << 20}) {
    // Fewer samples of the large messages: each takes milliseconds.
    const int samples = bytes <= (1u << 20) ? repetitions : std::max(5, repetitions / 10);
    rows.push_back({bytes, ping_pong(bytes, samples)});
  }
  const double alpha = rows.front().one_way.best;
  // The bandwidth of the best row from 64 KiB up: on an idle machine the largest message; on a
  // busy one, where a large message needs both ranks scheduled for longer than they get, the size
  // the scheduler hurt least.
  double beta = 0;
  for (const Row& r : rows) {
    if (r.bytes < (64u << 10)) continue;
    beta = std::max(beta, static_cast<double>(r.bytes) / (r.one_way.best - alpha));
  }

  auto comm = mpi.world({.timeout_seconds = 120});
  struct Reduce {
    size_t count;
    Timing seconds;
    double model;
  };
  std::vector<Reduce> reduces;
  for (size_t count : {size_t{101770}, size_t{5824522}}) {
    const double bytes = static_cast<double>(count) * sizeof(float);
    const int samples = count < 1000000 ? repetitions : std::max(5, repetitions / 10);
    reduces.push_back({count, all_reduce(*comm, count, samples), 2 * (alpha + bytes / 2 / beta)});
  }

  if (print) {
    std::printf("transport: %s (ranks on %s and %s), %d samples per row\n",
                one_host ? "shared memory, one host" : "between hosts", hosts[0].c_str(),
                hosts[1].c_str(), repetitions);
    std::printf("%-30s %22s %22s\n", "ping-pong bytes", "one-way us: med / best",
                "GB/s: med / best");
    for (const Row& r : rows) {
      const auto b = static_cast<double>(r.bytes);
      std::printf("%-30zu %11.2f / %8.2f %11.3f / %8.3f\n", r.bytes, r.one_way.median * 1e6,
                  r.one_way.best * 1e6, b / r.one_way.median / 1e9, b / r.one_way.best / 1e9);
    }
    std::printf("model (best rounds): alpha = %.2f us, beta = %.3f GB/s\n", alpha * 1e6,
                beta / 1e9);
    std::printf("%-30s %22s %10s\n", "all-reduce float32, 2 ranks", "us: med / best", "model us");
    for (const Reduce& r : reduces) {
      std::printf("%-30zu %11.1f / %8.1f %10.1f\n", r.count, r.seconds.median * 1e6,
                  r.seconds.best * 1e6, r.model * 1e6);
    }
  }
  if (print && !json_path.empty()) {
    std::ofstream out(json_path);
    out << "{\"transport\": \"" << (one_host ? "shared_memory" : "between_hosts") << "\", ";
    out << "\"alpha_s\": " << alpha << ", \"beta_bytes_per_s\": " << beta << ", \"ping_pong\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      out << (i ? ", " : "") << "{\"bytes\": " << rows[i].bytes
          << ", \"one_way_median_s\": " << rows[i].one_way.median
          << ", \"one_way_best_s\": " << rows[i].one_way.best << "}";
    }
    out << "], \"all_reduce\": [";
    for (size_t i = 0; i < reduces.size(); ++i) {
      out << (i ? ", " : "") << "{\"count\": " << reduces[i].count
          << ", \"median_s\": " << reduces[i].seconds.median
          << ", \"best_s\": " << reduces[i].seconds.best << ", \"model_s\": " << reduces[i].model
          << "}";
    }
    out << "]}\n";
  }
  comm.reset();
  mpi.finalize();
  return 0;
}
