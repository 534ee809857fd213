// How far apart two CPUs of the machine are: the round trip of one cache line between threads
// pinned to each; the read bandwidth of a buffer the other CPU wrote last, against the same
// buffer in the reader's own cache and in memory; and the rewrite of a buffer the other CPU read
// last, against one it did not. The step's update reads the other replica's gradient and rewrites
// the weights the other replica multiplied by, and the replicas read the weights the other thread
// updated: these say what that costs on the machine at hand (docs/machine.md, "How far apart the
// two CPUs are").
//   build/release/bench/core_to_core_bench
#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace {

// The first two CPUs this process may run on; {-1, -1} with fewer. Read once, before the
// benchmarks pin the main thread.
std::pair<int, int> first_two_cpus() {
  cpu_set_t s;
  CPU_ZERO(&s);
  sched_getaffinity(0, sizeof s, &s);
  int found[2] = {-1, -1}, n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < 2; ++c)
    if (CPU_ISSET(c, &s)) found[n++] = c;
  return {found[0], found[1]};
}
const std::pair<int, int> g_cpus = first_two_cpus();
std::pair<int, int> two_cpus() {
  return g_cpus;
}

void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

// Integer words: their sum vectorises (float sums would be a chain of dependent adds), as wide as
// the CPU allows, so that the reader is limited by where the lines are and not by its loop.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
uint64_t
sum_words(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  return a + b + c + d;
}

void BM_CacheLineRoundTrip(benchmark::State& state) {
  const auto [here, there] = two_cpus();
  if (there < 0) {
    state.SkipWithError("needs two CPUs");
    return;
  }
  alignas(64) static std::atomic<int64_t> line{0};
  constexpr int64_t kTrips = 100000;
  for (auto _ : state) {
    line.store(0);
    std::thread peer([there = there] {
      pin(there);
      for (int64_t i = 0; i < kTrips; ++i) {
        while (line.load(std::memory_order_acquire) != 2 * i + 1) {
        }
        line.store(2 * i + 2, std::memory_order_release);
      }
    });
    pin(here);
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < kTrips; ++i) {
      line.store(2 * i + 1, std::memory_order_release);
      while (line.load(std::memory_order_acquire) != 2 * i + 2) {
      }
    }
    const auto end = std::chrono::steady_clock::now();
    peer.join();
    state.SetIterationTime(std::chrono::duration<double>(end - start).count() / kTrips);
  }
}
// Time: one round trip (the line to the other CPU and back).
BENCHMARK(BM_CacheLineRoundTrip)->UseManualTime()->Unit(benchmark::kNanosecond)->Iterations(5);

enum class Where { other_cpu, own_cache, memory };

// The `KB` kilobytes (the benchmark's argument) a bandwidth benchmark works on, with the calling
// thread pinned to the first of two CPUs; empty, the state skipped, with fewer than two.
std::vector<uint64_t> pinned_buffer(benchmark::State& state) {
  const auto [here, there] = two_cpus();
  if (there < 0) {
    state.SkipWithError("needs two CPUs");
    return {};
  }
  pin(here);
  return std::vector<uint64_t>((static_cast<size_t>(state.range(0)) << 10) / sizeof(uint64_t));
}

// Runs f on a thread pinned to the second CPU and waits for it.
template <typename F>
void on_other_cpu(F&& f) {
  std::thread peer([&f] {
    pin(two_cpus().second);
    f();
  });
  peer.join();
}

// The buffer's bytes, once per iteration.
void count_bytes(benchmark::State& state, const std::vector<uint64_t>& buf) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * buf.size() * sizeof(uint64_t)));
}

// Runs f once as the iteration's manual time.
template <typename F>
void time_iteration(benchmark::State& state, F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  const auto end = std::chrono::steady_clock::now();
  state.SetIterationTime(std::chrono::duration<double>(end - start).count());
}

// Reads `KB` kilobytes that were last written by the other CPU, by this one, or flushed to memory.
void read_bench(benchmark::State& state, Where where) {
  std::vector<uint64_t> buf = pinned_buffer(state);
  if (buf.empty()) return;
  const size_t n = buf.size();
  uint64_t round = 0;
  auto fill = [&] {
    for (size_t i = 0; i < n; ++i) buf[i] = round + i;
  };
  for (auto _ : state) {
    ++round;
    if (where == Where::other_cpu) {
      on_other_cpu(fill);
    } else {
      fill();
    }
#if defined(__x86_64__) || defined(__i386__)
    if (where == Where::memory) {
      for (size_t i = 0; i < n; i += 64 / sizeof(uint64_t)) _mm_clflush(&buf[i]);
      _mm_mfence();
    }
#endif
    time_iteration(state, [&] { benchmark::DoNotOptimize(sum_words(buf.data(), n)); });
  }
  count_bytes(state, buf);
}

void BM_ReadWrittenByTheOtherCpu(benchmark::State& s) {
  read_bench(s, Where::other_cpu);
}
void BM_ReadFromOwnCache(benchmark::State& s) {
  read_bench(s, Where::own_cache);
}
void BM_ReadFromMemory(benchmark::State& s) {
  read_bench(s, Where::memory);
}
// Rewrites (adds one to every word of) `KB` kilobytes that this CPU wrote last, after the other
// CPU read them (other_cpu) or not (own_cache): the update's writes of the weights the other
// replica multiplied by. Each store must first take its line back from the other CPU's cache.
void rewrite_bench(benchmark::State& state, Where where) {
  std::vector<uint64_t> buf = pinned_buffer(state);
  if (buf.empty()) return;
  const size_t n = buf.size();
  uint64_t seen = 0;
  for (auto _ : state) {
    for (size_t i = 0; i < n; ++i) buf[i] += 1;
    if (where == Where::other_cpu) on_other_cpu([&] { seen += sum_words(buf.data(), n); });
    time_iteration(state, [&] {
      for (size_t i = 0; i < n; ++i) buf[i] += 1;
      benchmark::ClobberMemory();
    });
  }
  benchmark::DoNotOptimize(seen);
  count_bytes(state, buf);
}
void BM_RewriteReadByTheOtherCpu(benchmark::State& s) {
  rewrite_bench(s, Where::other_cpu);
}
void BM_RewriteOwnCache(benchmark::State& s) {
  rewrite_bench(s, Where::own_cache);
}
// 200 KB: half of the seed model's first-layer gradient or weights; 4 MB: past any L2.
BENCHMARK(BM_ReadWrittenByTheOtherCpu)->Arg(200)->Arg(400)->Arg(4096)->UseManualTime();
BENCHMARK(BM_RewriteReadByTheOtherCpu)->Arg(200)->Arg(400)->UseManualTime();
BENCHMARK(BM_RewriteOwnCache)->Arg(200)->Arg(400)->UseManualTime();
BENCHMARK(BM_ReadFromOwnCache)->Arg(200)->Arg(400)->Arg(4096)->UseManualTime();
#if defined(__x86_64__) || defined(__i386__)
BENCHMARK(BM_ReadFromMemory)->Arg(200)->Arg(400)->Arg(4096)->UseManualTime();
#endif

}  // namespace

BENCHMARK_MAIN();
