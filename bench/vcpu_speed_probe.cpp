// How fast each CPU computes, alone and beside the other: a thread pinned to each of the first two
// CPUs runs a compute-bound loop (independent multiply-add chains, no memory traffic) for a slice,
// first each alone — the other thread and the caller asleep — then both at once; repeated. A vCPU
// whose core the host shares with a busy hardware thread of another tenant computes slower even
// alone, which the guest sees nowhere else (no steal time, no stall: cpu_stall_probe reads
// nothing). Two vCPUs that are hardware threads of one core slow each other when both run. A
// training step on both CPUs waits for the slower one (docs/machine.md, "How fast each vCPU
// computes").
//   build/release/bench/vcpu_speed_probe [samples] [slice_ms]
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// Sixteen independent chains of 8-lane multiply-adds: enough to fill the multiply and add units
// of any x86-64 core without waiting on a chain's latency. Returns multiply-adds per second.
double compute_for(std::chrono::milliseconds slice) {
  typedef float V __attribute__((vector_size(32)));
  V acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = V{} + 1.0f + static_cast<float>(i) * 1e-3f;
  const V m = V{} + 0.999999f, a = V{} + 1e-7f;
  int64_t rounds = 0;
  const auto t0 = Clock::now();
  auto t = t0;
  do {
    for (int k = 0; k < 256; ++k) {
      for (auto& x : acc) x = x * m + a;
    }
    rounds += 256;
    t = Clock::now();
  } while (t - t0 < slice);
  float sink = 0;
  for (const auto& x : acc) {
    for (int l = 0; l < 8; ++l) sink += x[l];
  }
  if (sink == 12345.678f) std::puts("");  // keeps the chains alive
  const double seconds = std::chrono::duration<double>(t - t0).count();
  return static_cast<double>(rounds) * 16 * 8 / seconds;
}

struct Worker {
  std::atomic<int> go{0};  // 1: run one slice; -1: exit
  std::atomic<int> done{0};
  double rate = 0;
};

void nap() {
  std::this_thread::sleep_for(std::chrono::microseconds(50));
}

}  // namespace

int main(int argc, char** argv) {
  const int samples = argc > 1 ? std::atoi(argv[1]) : 20;
  const auto slice = std::chrono::milliseconds(argc > 2 ? std::atoi(argv[2]) : 20);
  if (samples < 1 || slice.count() < 1) {
    std::fprintf(stderr, "usage: %s [samples >= 1] [slice_ms >= 1]\n", argv[0]);
    return 2;
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  sched_getaffinity(0, sizeof allowed, &allowed);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  if (cpus.size() < 2) {
    // Nothing to compare; not an error for scripts/bench, which runs this before its rounds.
    std::printf("vcpu_speed_probe: one CPU allowed, nothing to compare\n");
    return 0;
  }
  Worker workers[2];
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus[static_cast<size_t>(w)], &one);
      pthread_setaffinity_np(pthread_self(), sizeof one, &one);
      for (;;) {
        int g;
        while ((g = workers[w].go.load()) == 0) nap();
        if (g < 0) return;
        workers[w].rate = compute_for(slice);
        workers[w].go.store(0);
        workers[w].done.store(1);
      }
    });
  }
  auto run = [&](bool first, bool second) {
    const bool which[2] = {first, second};
    for (int w = 0; w < 2; ++w) {
      workers[w].done.store(0);
      if (which[w]) workers[w].go.store(1);
    }
    for (int w = 0; w < 2; ++w) {
      while (which[w] && workers[w].done.load() == 0) nap();
    }
  };
  std::printf("multiply-adds per ns (GFMA/s) on CPU %d and CPU %d, %d samples of %lld ms slices\n",
              cpus[0], cpus[1], samples, static_cast<long long>(slice.count()));
  std::printf("%-8s %9s %9s %9s %9s %12s %12s\n", "sample", "alone_0", "alone_1", "both_0",
              "both_1", "slow/fast", "both/alone");
  std::vector<double> slow_fast, both_alone;
  for (int s = 0; s < samples; ++s) {
    run(true, false);
    const double a0 = workers[0].rate;
    run(false, true);
    const double a1 = workers[1].rate;
    run(true, true);
    const double b0 = workers[0].rate, b1 = workers[1].rate;
    const double sf = std::min(a0, a1) / std::max(a0, a1);
    const double ba = (b0 + b1) / (a0 + a1);
    slow_fast.push_back(sf);
    both_alone.push_back(ba);
    std::printf("%-8d %9.2f %9.2f %9.2f %9.2f %12.2f %12.2f\n", s + 1, a0 * 1e-9, a1 * 1e-9,
                b0 * 1e-9, b1 * 1e-9, sf, ba);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (auto& w : workers) w.go.store(-1);
  for (auto& t : threads) t.join();
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const auto slow =
      std::count_if(slow_fast.begin(), slow_fast.end(), [](double r) { return r < 0.85; });
  std::printf(
      "median slower/faster CPU alone: %.2f (below 0.85 in %lld of %d samples); median both at "
      "once / alone: %.2f\n",
      median(slow_fast), static_cast<long long>(slow), samples, median(both_alone));
  return 0;
}
