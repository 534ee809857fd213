// The inputs of the cost model in docs/distributed.md ("Cost model for scale"): latency and
// bandwidth of the path between two MPI processes, and the all-reduce a training step makes over
// it. Run it with 2 ranks on one host (Open MPI's shared-memory transport) and with one rank on
// each of two hosts (TCP):
//   mpirun -np 2 --bind-to none build/release/bench/mpi_transport_bench
//   bench/multihost_transport.sh build/release/bench/mpi_transport_bench   # two simulated hosts
// (as root, with OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 in the environment).
//
// Rows (rank 0 prints them; medians of `--repetitions` rounds, 5 by default):
//   * ping-pong of B bytes (MPI_Send / MPI_Recv, blocking: the transport alone): one-way time
//     = round trip / 2. The 8-byte row is the latency alpha; for large B, B / one-way is the
//     bandwidth beta. The model t(B) = alpha + B / beta is fitted on the 8 B and 64 MiB rows.
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

#include "lockstep/distribute/mpi_communicator.h"

namespace {

using lockstep::DType;
using namespace lockstep::distribute;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median one-way time (seconds) of a B-byte ping-pong between ranks 0 and 1.
double ping_pong(size_t bytes, int rounds, int repetitions) {
  std::vector<char> buf(std::max<size_t>(bytes, 1), 1);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int n = static_cast<int>(bytes);
  std::vector<double> times;
  for (int rep = -1; rep < repetitions; ++rep) {  // rep -1: warm-up (connections, pages)
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = Clock::now();
    for (int i = 0; i < rounds; ++i) {
      if (rank == 0) {
        MPI_Send(buf.data(), n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(buf.data(), n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (rank == 1) {
        MPI_Recv(buf.data(), n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf.data(), n, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
      }
    }
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (rep >= 0) times.push_back(s / rounds / 2);
  }
  return median(times);
}

// Median seconds of one all-reduce of `count` float32 through the communicator.
double all_reduce(Communicator& comm, size_t count, int rounds, int repetitions) {
  std::vector<float> buf(count, 0.0f);  // zeros: sums stay finite
  std::vector<double> times;
  for (int rep = -1; rep < repetitions; ++rep) {
    comm.barrier();
    const auto start = Clock::now();
    for (int i = 0; i < rounds; ++i)
      comm.all_reduce(buf.data(), count, DType::float32, ReduceOp::SUM);
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (rep >= 0) times.push_back(s / rounds);
  }
  return median(times);
}

}  // namespace

int main(int argc, char** argv) {
  MpiContext& mpi = mpi_initialize(&argc, &argv);
  int repetitions = 5;
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
    double one_way;
  };
  std::vector<Row> rows;
  for (size_t bytes : {size_t{8}, size_t{1} << 10, size_t{64} << 10, size_t{1} << 20,
                       size_t{16} << 20, size_t{64} << 20}) {
    // About the same time per size: many rounds for small messages, few for large ones.
    const int rounds = bytes <= (64u << 10) ? 2000 : (bytes <= (1u << 20) ? 200 : 10);
    rows.push_back({bytes, ping_pong(bytes, rounds, repetitions)});
  }
  const double alpha = rows.front().one_way;
  const double beta = static_cast<double>(rows.back().bytes) / (rows.back().one_way - alpha);

  auto comm = mpi.world({.timeout_seconds = 120});
  struct Reduce {
    size_t count;
    double seconds;
    double model;
  };
  std::vector<Reduce> reduces;
  for (size_t count : {size_t{101770}, size_t{5824522}}) {
    const double bytes = static_cast<double>(count) * sizeof(float);
    reduces.push_back({count, all_reduce(*comm, count, count < 1000000 ? 500 : 20, repetitions),
                       2 * (alpha + bytes / 2 / beta)});
  }

  if (print) {
    std::printf("transport: %s (ranks on %s and %s), medians of %d repetitions\n",
                one_host ? "shared memory, one host" : "between hosts", hosts[0].c_str(),
                hosts[1].c_str(), repetitions);
    std::printf("%-28s %14s %16s\n", "ping-pong", "one-way (us)", "bandwidth (GB/s)");
    for (const Row& r : rows) {
      std::printf("%-28zu %14.2f %16.3f\n", r.bytes, r.one_way * 1e6,
                  static_cast<double>(r.bytes) / r.one_way / 1e9);
    }
    std::printf("model: alpha = %.2f us, beta = %.3f GB/s\n", alpha * 1e6, beta / 1e9);
    std::printf("%-28s %14s %16s\n", "all-reduce float32 (2 ranks)", "measured (us)", "model (us)");
    for (const Reduce& r : reduces) {
      std::printf("%-28zu %14.1f %16.1f\n", r.count, r.seconds * 1e6, r.model * 1e6);
    }
  }
  if (print && !json_path.empty()) {
    std::ofstream out(json_path);
    out << "{\"transport\": \"" << (one_host ? "shared_memory" : "between_hosts") << "\", ";
    out << "\"alpha_s\": " << alpha << ", \"beta_bytes_per_s\": " << beta << ", \"ping_pong\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      out << (i ? ", " : "") << "{\"bytes\": " << rows[i].bytes
          << ", \"one_way_s\": " << rows[i].one_way << "}";
    }
    out << "], \"all_reduce\": [";
    for (size_t i = 0; i < reduces.size(); ++i) {
      out << (i ? ", " : "") << "{\"count\": " << reduces[i].count
          << ", \"seconds\": " << reduces[i].seconds << ", \"model_s\": " << reduces[i].model
          << "}";
    }
    out << "]}\n";
  }
  comm.reset();
  mpi.finalize();
  return 0;
}
