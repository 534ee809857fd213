// What the host takes from each CPU: a thread pinned to each of the first two CPUs reads the
// clock in a loop for a few seconds and records every gap longer than a threshold — time in which
// the CPU ran something else (the guest's interrupts, the hypervisor, another tenant). Per CPU:
// the gaps per second, their median and 90th percentile, the median interval between consecutive
// gaps, the share of time lost; then how much of one CPU's lost time the other lost at the same
// moment. A training step on both CPUs waits for the slower one: stalls at the same moments cost
// it what they cost one CPU, stalls at different moments up to twice that (docs/machine.md, "What
// the host takes from each CPU").
//   build/release/bench/cpu_stall_probe [seconds] [threshold_us]
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Gap {
  int64_t begin_ns, end_ns;
};

int64_t ns_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

std::vector<int> allowed_cpus() {
  cpu_set_t s;
  CPU_ZERO(&s);
  sched_getaffinity(0, sizeof s, &s);
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &s)) out.push_back(c);
  return out;
}

// Spins on `cpu` from t0 until t0 + duration, recording the gaps between two clock reads longer
// than `threshold`.
std::vector<Gap> probe(int cpu, Clock::time_point t0, int64_t duration_ns, int64_t threshold_ns) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  if (pthread_setaffinity_np(pthread_self(), sizeof s, &s) != 0) {
    std::fprintf(stderr, "cpu_stall_probe: cannot pin a thread to CPU %d\n", cpu);
    std::exit(1);
  }
  std::vector<Gap> gaps;
  gaps.reserve(1 << 16);
  while (Clock::now() < t0) {
  }
  int64_t last = ns_since(t0);
  while (last < duration_ns) {
    const int64_t now = ns_since(t0);
    if (now - last > threshold_ns) gaps.push_back({last, now});
    last = now;
  }
  return gaps;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * (v.size() - 1) + 0.5));
  return v[i];
}

int64_t overlap(const std::vector<Gap>& a, const std::vector<Gap>& b) {
  int64_t total = 0;
  size_t j = 0;
  for (const Gap& g : a) {
    while (j < b.size() && b[j].end_ns <= g.begin_ns) ++j;
    for (size_t k = j; k < b.size() && b[k].begin_ns < g.end_ns; ++k)
      total += std::min(g.end_ns, b[k].end_ns) - std::max(g.begin_ns, b[k].begin_ns);
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
  const double threshold_us = argc > 2 ? std::atof(argv[2]) : 10.0;
  if (!(seconds > 0) || !(threshold_us > 0)) {
    std::fprintf(stderr, "usage: cpu_stall_probe [seconds > 0] [threshold_us > 0]\n");
    return 2;
  }
  const std::vector<int> cpus = allowed_cpus();
  const size_t n = std::min<size_t>(2, cpus.size());
  const auto duration_ns = static_cast<int64_t>(seconds * 1e9);
  const auto threshold_ns = static_cast<int64_t>(threshold_us * 1e3);
  const Clock::time_point t0 = Clock::now() + std::chrono::milliseconds(20);
  std::vector<std::vector<Gap>> gaps(n);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i)
    threads.emplace_back([&, i] { gaps[i] = probe(cpus[i], t0, duration_ns, threshold_ns); });
  for (std::thread& t : threads) t.join();

  std::printf("gaps longer than %.0f us in %.1f s of spinning, per CPU\n", threshold_us, seconds);
  std::printf("%4s %9s %11s %11s %14s %10s\n", "cpu", "gaps/s", "p50 us", "p90 us", "interval us",
              "time lost");
  std::vector<int64_t> lost(n, 0);
  for (size_t i = 0; i < n; ++i) {
    std::vector<double> lengths, intervals;
    for (size_t k = 0; k < gaps[i].size(); ++k) {
      const Gap& g = gaps[i][k];
      lengths.push_back(static_cast<double>(g.end_ns - g.begin_ns) / 1e3);
      lost[i] += g.end_ns - g.begin_ns;
      if (k > 0)
        intervals.push_back(static_cast<double>(g.begin_ns - gaps[i][k - 1].begin_ns) / 1e3);
    }
    std::printf("%4d %9.0f %11.1f %11.1f %14.1f %9.2f%%\n", cpus[i],
                static_cast<double>(gaps[i].size()) / seconds, percentile(lengths, 50),
                percentile(lengths, 90), percentile(intervals, 50),
                100.0 * static_cast<double>(lost[i]) / static_cast<double>(duration_ns));
  }
  if (n == 2) {
    const int64_t both = overlap(gaps[0], gaps[1]);
    std::printf(
        "time both CPUs lost at once: %.2f%% of the run, %.0f%% of CPU %d's lost time\n",
        100.0 * static_cast<double>(both) / static_cast<double>(duration_ns),
        lost[0] > 0 ? 100.0 * static_cast<double>(both) / static_cast<double>(lost[0]) : 0.0,
        cpus[0]);
  }
  return 0;
}
