// Input-pipeline throughput on Fashion-MNIST (docs/performance.md, "Input pipeline").
//
//   pipeline_bench [--seconds S] [--cores N]
//
// Pins the process (every thread, including prefetch's) to N cores (default 1) and reports, for
// each pipeline variant, examples per second delivered to a consumer that only touches each batch,
// and the resident memory.
#include <sched.h>

#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "lockstep/data.h"

using namespace lockstep;

namespace {

long rss_kib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field, 0) == 0)
      return std::strtol(line.c_str() + std::strlen(field), nullptr, 10);
  }
  return -1;
}

// x uint8[..., 28, 28] -> float32[..., 784] / 255; y unchanged. Works on one element or a batch.
Element scale_and_flatten(const Element& e) {
  const Tensor& x = e[0];
  int64_t rows = x.rank() == 3 ? x.dim(0) : 1;
  Shape out_shape = x.rank() == 3 ? Shape{rows, 784} : Shape{784};
  Tensor out(out_shape, DType::float32);
  const uint8_t* src = x.data<uint8_t>();
  float* dst = out.data<float>();
  const int64_t n = rows * 784;
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]) * (1.0f / 255.0f);
  return {out, e[1]};
}

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Result {
  double examples_per_s;
  double examples_per_cpu_s;  // robust to other processes sharing the core
  double batches;
  long rss_delta_kib;
};

Result run(const Dataset& ds, double seconds, int64_t batch) {
  long rss0 = rss_kib("VmRSS:");
  Iterator it = ds.make_iterator();
  Element b;
  volatile float sink = 0;
  for (int i = 0; i < 20; ++i) it.next(b);  // warm up: fills the shuffle buffer, the pool, AUTOTUNE
  auto t0 = std::chrono::steady_clock::now();
  double c0 = cpu_seconds();
  int64_t n = 0;
  double dt = 0;
  do {
    for (int i = 0; i < 50; ++i) {
      it.next(b);
      sink = sink + static_cast<float>(b[0].nbytes());  // the consumer touches the batch handle
    }
    n += 50;
    dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (dt < seconds);
  double cpu = cpu_seconds() - c0;
  long rss1 = rss_kib("VmRSS:");
  return {static_cast<double>(n * batch) / dt, static_cast<double>(n * batch) / cpu,
          static_cast<double>(n), rss1 - rss0};
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2.0;
  int cores = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--seconds")) seconds = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--cores")) cores = std::atoi(argv[i + 1]);
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c = 0; c < cores; ++c) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) std::perror("sched_setaffinity");

  long rss_start = rss_kib("VmRSS:");
  auto t0 = std::chrono::steady_clock::now();
  auto [train, test] = datasets::fashion_mnist::load_data();
  double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto& [x, y] = train;
  std::printf("Fashion-MNIST train %s %s loaded in %.2f s; RSS %ld MiB (+%ld MiB)\n",
              x.describe().c_str(), y.describe().c_str(), load_s, rss_kib("VmRSS:") / 1024,
              (rss_kib("VmRSS:") - rss_start) / 1024);
  std::printf("pinned to %d core(s); %.1f s per variant; batch 256\n\n", cores, seconds);

  const int64_t B = 256;
  Dataset slices = Dataset::from_tensor_slices({x, y});
  struct Variant {
    const char* name;
    Dataset ds;
  };
  Variant variants[] = {
      {"seed order: map(scale,flatten) per element -> shuffle(60000) -> repeat -> batch(256) "
       "-> prefetch(AUTOTUNE)",
       slices.map(scale_and_flatten)
           .shuffle(60000, 1)
           .repeat()
           .batch(B)
           .prefetch(Dataset::AUTOTUNE)},
      {"uint8 first: shuffle(60000) -> repeat -> batch(256) -> map(scale,flatten) per batch "
       "-> prefetch(AUTOTUNE)",
       slices.shuffle(60000, 1)
           .repeat()
           .batch(B)
           .map(scale_and_flatten)
           .prefetch(Dataset::AUTOTUNE)},
      {"same, no prefetch (single thread)",
       slices.shuffle(60000, 1).repeat().batch(B).map(scale_and_flatten)},
      {"uint8 batches only: shuffle(60000) -> repeat -> batch(256) (gather ceiling)",
       slices.shuffle(60000, 1).repeat().batch(B)},
      {"no shuffle: repeat -> batch(256) -> map(scale,flatten) (contiguous copy + convert)",
       slices.repeat().batch(B).map(scale_and_flatten)},
  };
  std::printf(
      "| pipeline | examples/s (wall) | examples per CPU-second | MB/s out (x) | RSS delta |\n"
      "| --- | --- | --- | --- | --- |\n");
  for (Variant& v : variants) {
    Result r = run(v.ds, seconds, B);
    ElementSpec spec = v.ds.element_spec();
    double bytes_per_example = 1;
    for (size_t i = 1; i < spec[0].shape.size(); ++i)
      bytes_per_example *= static_cast<double>(spec[0].shape[i]);
    bytes_per_example *= static_cast<double>(dtype_size(spec[0].dtype));
    std::printf("| %s | %.2fM | %.2fM | %.0f | %+ld MiB |\n", v.name, r.examples_per_s / 1e6,
                r.examples_per_cpu_s / 1e6, r.examples_per_s * bytes_per_example / 1e6,
                r.rss_delta_kib / 1024);
    std::fflush(stdout);
  }
  std::printf("\npeak RSS (VmHWM) %ld MiB\n", rss_kib("VmHWM:") / 1024);
  return 0;
}
