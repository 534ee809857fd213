// The ops on the seed model's hot path (784-128-10, batch 128, one core): the five matmuls of a
// training step (forward x·W1, h·W2; backward dW2, dh, dW1 — the first layer's dx is skipped),
// and small eltwise / softmax ops where a plain loop may beat a oneDNN call.
//   OMP_NUM_THREADS=1 taskset -c 0 build/release/bench/ops_bench
// Reference: oneDNN's own time for the five matmuls on each CPU class is in docs/machine.md, "The
// CPUs seen so far".
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "lockstep/core/cpu_isa.h"
#include "lockstep/core/random.h"
#include "lockstep/ops.h"

namespace lockstep {
namespace {

struct SeedStep {
  explicit SeedStep(DType dt) {
    Generator gen(1);
    x = gen.uniform({128, 784}, -1, 1, dt);
    k1 = gen.uniform({784, 128}, -0.1, 0.1, dt);
    k2 = gen.uniform({128, 10}, -0.1, 0.1, dt);
    b1 = Tensor::zeros({128}, dt);
    b2 = Tensor::zeros({10}, dt);
    dy = gen.uniform({128, 10}, -1, 1, dt);
    h = Tensor({128, 128}, dt);
    y = Tensor({128, 10}, dt);
    dh = Tensor({128, 128}, dt);
    dk1 = Tensor({784, 128}, dt);
    db1 = Tensor({128}, dt);
    dk2 = Tensor({128, 10}, dt);
    db2 = Tensor({10}, dt);
  }
  void run() {
    ops::linear_into(x, k1, b1, ops::FusedActivation::relu, h);
    ops::linear_into(h, k2, b2, ops::FusedActivation::none, y);
    ops::linear_backward_into(dy, h, k2, y, ops::FusedActivation::none, dh, dk2, db2);
    ops::linear_backward_into(dh, x, k1, h, ops::FusedActivation::relu, Tensor(), dk1, db1);
  }
  Tensor x, k1, k2, b1, b2, dy, h, y, dh, dk1, db1, dk2, db2;
};

constexpr double kSeedStepFlop = 128.0 * 2 * (784 * 128 + 128 * 10) * 2 +  // fwd + dW
                                 128.0 * 2 * 128 * 10;                     // dh

void BM_SeedStepLinear(benchmark::State& state) {
  SeedStep s(state.range(0) == 0 ? DType::float32 : DType::bfloat16);
  for (auto _ : state) s.run();
  state.counters["GFLOP/s"] = benchmark::Counter(
      kSeedStepFlop * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(state.range(0) == 0 ? "float32" : "bfloat16");
}
BENCHMARK(BM_SeedStepLinear)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// The floor: the same five matmuls straight through oneDNN's own matmul primitives — no Lockstep
// code, no bias, no activation — so that speeding up Lockstep's ops cannot move the floor they are
// compared with. float32: every operand float32. bfloat16: every operand bfloat16, the weight
// gradients written as float32 (bf16 x bf16 -> f32, as mixed_bfloat16 training needs them).
// scripts/bench runs one pinned copy per core at once (OMP_NUM_THREADS=1).
//
// `packed`: the weights operand of each matmul, and the source of the two weight gradients (xᵀ,
// hᵀ), in the layouts oneDNN prefers (format_tag::any), as if whoever writes them wrote them that
// way: what the floor would be if the step never handed oneDNN an operand it copies into its own
// layout first. Not the floor the targets use; a measure of what those copies cost.
// `only` (in the order below; 0-4 for the seed model): that one matmul alone.
// `widths`: the layers' widths, input first (the seed model's 784-128-10 by default; the wide
// model's 784-2048-2048-10 for its floor): forward x·W for every layer, then from the last layer
// back its weight gradient and, but for the first layer, its input gradient; batch 128.
class OneDnnMlpStep {
 public:
  explicit OneDnnMlpStep(bool bf16, bool packed = false, int only = -1,
                         const std::vector<int64_t>& widths = {784, 128, 10})
      : packed_(packed), only_(only) {
    using dt = dnnl::memory::data_type;
    const dt a = bf16 ? dt::bf16 : dt::f32;
    const int64_t b = 128;
    const size_t layers = widths.size() - 1;
    for (size_t l = 0; l < layers; ++l) {
      add({b, widths[l]}, false, a, {widths[l], widths[l + 1]}, false, a, a);  // y = x · W
    }
    for (size_t l = layers; l-- > 0;) {
      const int64_t in = widths[l], out = widths[l + 1];
      add({in, b}, true, a, {b, out}, false, a, dt::f32);         // dW = xᵀ · dy
      if (l > 0) add({b, out}, false, a, {out, in}, true, a, a);  // dx = dy · Wᵀ
    }
  }
  void run() {
    for (auto& m : matmuls_) m.prim.execute(stream_, m.args);
    stream_.wait();
  }

 private:
  struct Matmul {
    dnnl::matmul prim;
    std::unordered_map<int, dnnl::memory> args;
  };
  // src [m, k] (stored transposed when ta), weights [k, n] (stored transposed when tb).
  void add(dnnl::memory::dims src, bool ta, dnnl::memory::data_type st, dnnl::memory::dims wei,
           bool tb, dnnl::memory::data_type wt, dnnl::memory::data_type dst_t) {
    if (only_ >= 0 && added_++ != only_) return;
    using tag = dnnl::memory::format_tag;
    dnnl::memory::desc sd(src, st, packed_ && ta ? tag::any : ta ? tag::ba : tag::ab);
    dnnl::memory::desc wd(wei, wt, packed_ ? tag::any : tb ? tag::ba : tag::ab);
    dnnl::memory::desc dd({src[0], wei[1]}, dst_t, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(sd, wd, dd), engine_);
    Matmul m{dnnl::matmul(pd),
             {{DNNL_ARG_SRC, filled(pd.src_desc())},
              {DNNL_ARG_WEIGHTS, filled(pd.weights_desc())},
              {DNNL_ARG_DST, dnnl::memory(dd, engine_)}}};
    matmuls_.push_back(std::move(m));
  }
  // Small nonzero values (zeros could take faster paths in the FMA units of some CPUs).
  dnnl::memory filled(const dnnl::memory::desc& d) {
    dnnl::memory mem(d, engine_);
    auto* bytes = static_cast<uint16_t*>(mem.get_data_handle());
    for (size_t i = 0; i < d.get_size() / 2; ++i) bytes[i] = static_cast<uint16_t>(0x3c00 + i % 97);
    return mem;
  }
  // Under Lockstep's ISA cap, as Lockstep's own kernels are (ops::onednn_cpu_isa hands the cap to
  // oneDNN before its first primitive).
  static dnnl::engine capped_engine() {
    (void)ops::onednn_cpu_isa();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }
  bool packed_;
  int only_;
  int added_ = 0;
  dnnl::engine engine_ = capped_engine();
  dnnl::stream stream_{engine_};
  std::vector<Matmul> matmuls_;
};

void BM_SeedStepOneDnn(benchmark::State& state) {
  if (state.range(0) != 0 && !ops::has_native_bfloat16_math()) {
    state.SkipWithError("no bfloat16 floor: oneDNN has no bfloat16 kernels on this CPU (emulated)");
    return;
  }
  OneDnnMlpStep s(state.range(0) != 0);
  for (auto _ : state) s.run();
  state.counters["GFLOP/s"] = benchmark::Counter(
      kSeedStepFlop * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(state.range(0) == 0 ? "float32" : "bfloat16");
}
BENCHMARK(BM_SeedStepOneDnn)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// The wide model's floor (784-2048-2048-10, batch 128 a replica): its eight matmuls through
// oneDNN's own primitives, as BM_SeedStepOneDnn for the seed model. scripts/bench runs one pinned
// copy per core at once when the wide model is measured.
constexpr double kWideStepFlop =
    128.0 * (3 * 2 * (784.0 * 2048 + 2048.0 * 2048 + 2048.0 * 10) - 2 * 784.0 * 2048);
void BM_WideStepOneDnn(benchmark::State& state) {
  if (state.range(0) != 0 && !ops::has_native_bfloat16_math()) {
    state.SkipWithError("no bfloat16 floor: oneDNN has no bfloat16 kernels on this CPU (emulated)");
    return;
  }
  OneDnnMlpStep s(state.range(0) != 0, false, -1, {784, 2048, 2048, 10});
  for (auto _ : state) s.run();
  state.counters["GFLOP/s"] = benchmark::Counter(
      kWideStepFlop * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(state.range(0) == 0 ? "float32" : "bfloat16");
}
BENCHMARK(BM_WideStepOneDnn)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

// The wide step's matmuls with the operands in oneDNN's preferred layouts (as
// BM_SeedStepOneDnnPacked): what oneDNN's copies of plain weights cost at the wide shapes.
void BM_WideStepOneDnnPacked(benchmark::State& state) {
  if (state.range(0) != 0 && !ops::has_native_bfloat16_math()) {
    state.SkipWithError("no bfloat16 kernels on this CPU (emulated)");
    return;
  }
  OneDnnMlpStep s(state.range(0) != 0, /*packed=*/true, -1, {784, 2048, 2048, 10});
  for (auto _ : state) s.run();
  state.counters["GFLOP/s"] = benchmark::Counter(
      kWideStepFlop * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(state.range(0) == 0 ? "float32, preferred layouts"
                                     : "bfloat16, preferred layouts");
}
BENCHMARK(BM_WideStepOneDnnPacked)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

// What an optimizer's pass over weights too big for the caches can move at most: per element, read
// a gradient, the weight and two moments, write the weight and the moments (28 bytes), with no
// arithmetic to wait for. Arg: elements per copy; scripts/bench runs one pinned copy per core at
// once over half the wide model's weights each, and reads GB/s (wall clock).
__attribute__((noinline)) void stream_pass(float* __restrict w, float* __restrict m,
                                           float* __restrict v, const float* __restrict g,
                                           size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    m[i] += gi;
    v[i] += gi;
    w[i] += gi;
  }
}
void BM_UpdateStream(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  std::vector<float> w(n, 0.5f), m(n, 0.0f), v(n, 0.1f), g(n, 1e-30f);
  for (auto _ : state) {
    stream_pass(w.data(), m.data(), v.data(), g.data(), n);
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(
      28.0 * static_cast<double>(n) * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_UpdateStream)->Arg(2912261)->UseRealTime()->Unit(benchmark::kMillisecond);

// The same floor timed by the wall clock instead of the thread's CPU time: beside a co-runner a
// copy that is descheduled for part of the time loses that part, as a training run does. The
// harness measures the floor beside its co-runner with it.
void BM_SeedStepOneDnnWallClock(benchmark::State& state) {
  BM_SeedStepOneDnn(state);
}
BENCHMARK(BM_SeedStepOneDnnWallClock)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The same five matmuls with their operands already in oneDNN's preferred layouts (OneDnnMlpStep's
// `packed`): the difference from BM_SeedStepOneDnn is what oneDNN's copies of plain operands cost.
void BM_SeedStepOneDnnPacked(benchmark::State& state) {
  if (state.range(0) != 0 && !ops::has_native_bfloat16_math()) {
    state.SkipWithError("no bfloat16 floor: oneDNN has no bfloat16 kernels on this CPU (emulated)");
    return;
  }
  OneDnnMlpStep s(state.range(0) != 0, /*packed=*/true);
  for (auto _ : state) s.run();
  state.counters["GFLOP/s"] = benchmark::Counter(
      kSeedStepFlop * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(state.range(0) == 0 ? "float32, preferred layouts"
                                     : "bfloat16, preferred layouts");
}
BENCHMARK(BM_SeedStepOneDnnPacked)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// The two big matmuls of the seed step one at a time, plain and in the preferred layouts:
// args {matmul: 0 = x·W1 (W1 preferred), 4 = dW1 = xᵀ·dh (xᵀ and dh preferred), bfloat16, packed}.
// Where each of oneDNN's copies of a plain operand goes.
void BM_SeedMatmulLayout(benchmark::State& state) {
  const bool bf16 = state.range(1) != 0, packed = state.range(2) != 0;
  if (bf16 && !ops::has_native_bfloat16_math()) {
    state.SkipWithError("no bfloat16 kernels on this CPU (emulated)");
    return;
  }
  const int which = static_cast<int>(state.range(0));
  OneDnnMlpStep s(bf16, packed, which);
  for (auto _ : state) s.run();
  state.SetLabel(std::string(which == 0 ? "x·W1" : "dW1 = xᵀ·dh") +
                 (bf16 ? ", bfloat16" : ", float32") +
                 (packed ? ", preferred layouts" : ", plain"));
}
BENCHMARK(BM_SeedMatmulLayout)
    ->ArgsProduct({{0, 4}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

// What a core does right after the seed step's five matmuls (OneDnnMlpStep), in float32 (arg 0)
// or bfloat16 (arg 1: AMX where oneDNN has it): the time of an Adam-like divider loop over 4,096
// L1-resident elements and of a chain of dependent integer operations (its time is the clock's
// inverse). Only the two loops are timed (manual time); "chain ns" is the chain alone. Where the
// bfloat16 rows run slower than the float32 ones, the core's clock dropped after its matrix units
// ran: what the update and the other hand-written loops of a mixed_bfloat16 step run at.
__attribute__((noinline)) uint64_t dependent_chain(uint64_t x) {
  for (int i = 0; i < 20000; ++i) {
    asm volatile("" : "+r"(x));
    x = x * 3 + 1;
  }
  return x;
}
__attribute__((noinline)) float divider_loop(std::vector<float>& w, std::vector<float>& m,
                                             std::vector<float>& v, const std::vector<float>& g) {
  for (size_t i = 0; i < w.size(); ++i) {
    m[i] = m[i] + (g[i] - m[i]) * 0.1f;
    v[i] = v[i] + (g[i] * g[i] - v[i]) * 0.001f;
    w[i] = w[i] - m[i] * 0.001f / (std::sqrt(v[i]) + 1e-7f);
  }
  return w[7];
}
void BM_AfterSeedMatmuls(benchmark::State& state) {
  const bool bf16 = state.range(0) != 0;
  if (bf16 && !ops::has_native_bfloat16_math()) {
    state.SkipWithError("no bfloat16 kernels on this CPU (emulated)");
    return;
  }
  OneDnnMlpStep step(bf16);
  std::vector<float> w(4096, 0.5f), m(4096, 0.0f), v(4096, 0.1f), g(4096, 0.01f);
  double chain_seconds = 0;
  uint64_t x = 1;
  for (auto _ : state) {
    step.run();
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(divider_loop(w, m, v, g));
    const auto t1 = std::chrono::steady_clock::now();
    x = dependent_chain(x);
    const auto t2 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(x);
    chain_seconds += std::chrono::duration<double>(t2 - t1).count();
    state.SetIterationTime(std::chrono::duration<double>(t2 - t0).count());
  }
  state.counters["chain ns"] =
      benchmark::Counter(chain_seconds * 1e9 / static_cast<double>(state.iterations()));
  state.SetLabel(bf16 ? "after bfloat16 matmuls" : "after float32 matmuls");
}
BENCHMARK(BM_AfterSeedMatmuls)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMicrosecond);

// What one core's float32 FMA units can do at most: twelve independent chains of fused
// multiply-adds (enough to cover their latency on two FMA ports), no memory traffic, as wide as the
// ISA cap allows (lockstep/core/cpu_isa.h): AVX-512, else AVX2 + FMA; 0 below AVX2. The floor above
// divided by this is how close oneDNN's kernels come to the hardware on the seed's shapes.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) float fma_chains_512(int64_t rounds) {
  using v16 = float __attribute__((vector_size(64)));
  v16 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = v16{} + 0.001f * static_cast<float>(i);
  const v16 a = v16{} + 0.9999f, b = v16{} + 0.0001f;
  for (int64_t r = 0; r < rounds; ++r) {
    for (int i = 0; i < 12; ++i) acc[i] = __builtin_ia32_vfmaddps512_mask(acc[i], a, b, -1, 4);
  }
  v16 sum = v16{};
  for (int i = 0; i < 12; ++i) sum += acc[i];
  float out = 0;
  for (int i = 0; i < 16; ++i) out += sum[i];
  return out;
}
__attribute__((target("avx2,fma"))) float fma_chains_256(int64_t rounds) {
  using v8 = float __attribute__((vector_size(32)));
  v8 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = v8{} + 0.001f * static_cast<float>(i);
  const v8 a = v8{} + 0.9999f, b = v8{} + 0.0001f;
  for (int64_t r = 0; r < rounds; ++r) {
    for (int i = 0; i < 12; ++i) acc[i] = __builtin_ia32_vfmaddps256(acc[i], a, b);
  }
  v8 sum = v8{};
  for (int i = 0; i < 12; ++i) sum += acc[i];
  float out = 0;
  for (int i = 0; i < 8; ++i) out += sum[i];
  return out;
}
#endif

void BM_FmaPeak(benchmark::State& state) {
  constexpr int64_t kRounds = 1 << 16;
  int lanes = 0;
#if defined(__x86_64__)
  const CpuIsa isa = effective_cpu_isa();
  lanes = isa >= CpuIsa::avx512_core ? 16 : isa >= CpuIsa::avx2 ? 8 : 0;
#endif
  for (auto _ : state) {
    int64_t rounds = kRounds;
    benchmark::DoNotOptimize(rounds);  // else the call, pure and the same each time, is hoisted
#if defined(__x86_64__)
    if (lanes == 16) benchmark::DoNotOptimize(fma_chains_512(rounds));
    if (lanes == 8) benchmark::DoNotOptimize(fma_chains_256(rounds));
#endif
  }
  const double flop = 12.0 * lanes * 2 * kRounds;
  state.counters["GFLOP/s"] = benchmark::Counter(
      flop * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(lanes == 16 ? "float32 AVX-512 FMA" : lanes == 8 ? "float32 AVX2 FMA" : "no FMA");
}
BENCHMARK(BM_FmaPeak)->Unit(benchmark::kMicrosecond);

void BM_Matmul(benchmark::State& state) {
  const bool ta = state.range(0) & 1, tb = state.range(0) & 2;
  Generator gen(2);
  Tensor a = gen.uniform(ta ? Shape{784, 128} : Shape{128, 784}, -1, 1);
  Tensor b = gen.uniform(tb ? Shape{128, 784} : Shape{784, 128}, -1, 1);
  Tensor out({128, 128});
  for (auto _ : state) ops::matmul_into(a, b, out, ta, tb);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * 128 * 784 * 128 * static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Matmul)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);

void BM_Relu128x10(benchmark::State& state) {
  Generator gen(3);
  Tensor x = gen.uniform({128, 10}, -1, 1);
  for (auto _ : state) benchmark::DoNotOptimize(ops::relu_forward(x));
}
BENCHMARK(BM_Relu128x10);

void BM_ReluBackward128x10(benchmark::State& state) {  // a loop kernel, for comparison
  Generator gen(3);
  Tensor y = gen.uniform({128, 10}, -1, 1), dy = gen.uniform({128, 10}, -1, 1);
  for (auto _ : state) benchmark::DoNotOptimize(ops::relu_backward(dy, y));
}
BENCHMARK(BM_ReluBackward128x10);

// The seed model's hidden layer: relu's gradient and the bias gradient in one pass (what its
// backward runs before the weight gradient), float32 and bfloat16.
void BM_ReluBiasGrad128x128(benchmark::State& state) {
  const DType dt = state.range(0) == 0 ? DType::float32 : DType::bfloat16;
  Generator gen(6);
  const Tensor dy = gen.uniform({128, 128}, -1, 1, dt), y = gen.uniform({128, 128}, -1, 1, dt);
  const Tensor x({128, 8}, dt), kernel({8, 128}, dt), dbias({128}, dt);
  for (auto _ : state) {
    ops::linear_backward_into(dy, x, kernel, y, ops::FusedActivation::relu, Tensor(), Tensor(),
                              dbias);
  }
  state.SetLabel(state.range(0) == 0 ? "float32" : "bfloat16");
}
BENCHMARK(BM_ReluBiasGrad128x128)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_Softmax128x10(benchmark::State& state) {
  Generator gen(4);
  Tensor x = gen.uniform({128, 10}, -1, 1);
  for (auto _ : state) benchmark::DoNotOptimize(ops::softmax_forward(x));
}
BENCHMARK(BM_Softmax128x10);

void BM_CategoricalCrossentropy128x10(benchmark::State& state) {
  Generator gen(5);
  Tensor p = ops::softmax_forward(gen.uniform({128, 10}, -1, 1));
  Tensor t = ops::one_hot(Tensor::zeros({128}, DType::int32), 10);
  for (auto _ : state) benchmark::DoNotOptimize(ops::categorical_crossentropy_forward(t, p));
}
BENCHMARK(BM_CategoricalCrossentropy128x10);

}  // namespace
}  // namespace lockstep

BENCHMARK_MAIN();
