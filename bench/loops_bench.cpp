// Lockstep's own hot loops (not oneDNN's) on one core: Adam's update over the seed model's
// 101,770 parameters, the float32 <-> bfloat16 conversions and relu with its gradient over 2^20
// elements, and attention and layer normalization forward and backward at the ViT's shape. Each is
// built for x86-64, x86-64-v3 and x86-64-v4 and chosen under the ISA cap, so the three builds are
// measured by running this under caps (docs/performance.md):
//   for cap in SSE41 AVX2 AVX512_CORE; do
//     LOCKSTEP_MAX_CPU_ISA=$cap OMP_NUM_THREADS=1 taskset -c 0 build/release/bench/loops_bench
//   done
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/cpu_isa.h"
#include "lockstep/core/random.h"
#include "lockstep/keras/layers/preprocessing.h"
#include "lockstep/keras/optimizers.h"
#include "lockstep/ops/activations.h"
#include "lockstep/ops/attention.h"
#include "lockstep/ops/bfloat16_values.h"
#include "lockstep/ops/nn_norm.h"

namespace lockstep {
namespace {

constexpr int64_t kElements = 1 << 20;
constexpr int64_t kSeedParameters = 784 * 128 + 128 + 128 * 10 + 10;

void label(benchmark::State& state, double bytes_per_element, int64_t n) {
  state.SetLabel(std::string(loop_isa_name(loop_isa())));
  state.SetBytesProcessed(static_cast<int64_t>(bytes_per_element * static_cast<double>(n)) *
                          static_cast<int64_t>(state.iterations()));
}

void BM_FloatToBfloat16(benchmark::State& state) {
  Tensor x = Generator(1).uniform({kElements}, -1, 1);
  std::vector<bfloat16> y(kElements);
  for (auto _ : state) {
    float_to_bfloat16(x.data<float>(), y.data(), kElements);
    benchmark::DoNotOptimize(y.data());
  }
  label(state, 6, kElements);
}
BENCHMARK(BM_FloatToBfloat16);

void BM_Bfloat16ToFloat(benchmark::State& state) {
  std::vector<bfloat16> x(kElements, bfloat16(0.5f));
  std::vector<float> y(kElements);
  for (auto _ : state) {
    bfloat16_to_float(x.data(), y.data(), kElements);
    benchmark::DoNotOptimize(y.data());
  }
  label(state, 6, kElements);
}
BENCHMARK(BM_Bfloat16ToFloat);

void BM_Relu(benchmark::State& state) {
  Tensor x = Generator(2).uniform({kElements}, -1, 1);
  for (auto _ : state) benchmark::DoNotOptimize(ops::relu_forward(x));
  label(state, 8, kElements);
}
BENCHMARK(BM_Relu);

void BM_ReluBackward(benchmark::State& state) {
  Generator gen(3);
  Tensor y = ops::relu_forward(gen.uniform({kElements}, -1, 1));
  Tensor dy = gen.uniform({kElements}, -1, 1);
  for (auto _ : state) benchmark::DoNotOptimize(ops::relu_backward(dy, y));
  label(state, 12, kElements);
}
BENCHMARK(BM_ReluBackward);

// The seed model's Rescaling(1/255) of a replica's batch (128 examples of 784 uint8 pixels), into
// the layer's compute dtype: argument 0 float32, 1 bfloat16 (bytes: the uint8 read, the output).
void BM_RescalingUint8(benchmark::State& state) {
  const bool bf16 = state.range(0) == 1;
  keras::layers::Rescaling rescale(
      {.scale = 1.0 / 255, .dtype = bf16 ? "mixed_bfloat16" : "float32"});
  constexpr int64_t kRows = 128, kPixels = 784;
  Tensor x = Generator(6).uniform({kRows, kPixels}, 0, 255).to(DType::uint8);
  for (auto _ : state) benchmark::DoNotOptimize(rescale(x));
  label(state, bf16 ? 3 : 5, kRows * kPixels);
}
BENCHMARK(BM_RescalingUint8)->Arg(0)->Arg(1);

// Adam steps on a variable of `shape` through the training step's path (ElementwiseUpdate::apply),
// in place, writing the new weights' bfloat16 copy (mixed_bfloat16's) to `copy` when it has
// room: in `layout` when given, else plainly.
void adam_steps(benchmark::State& state, const Shape& shape, std::vector<bfloat16>& copy,
                const PairedRowsLayout* layout) {
  Generator gen(4);
  Variable w(gen.uniform(shape, -0.1, 0.1), "w");
  Tensor g = gen.uniform(shape, -0.01, 0.01);
  keras::optimizers::Adam adam;
  adam.bind({w});
  std::vector<Variable> slots = adam.slot_variables(0);
  std::vector<const float*> in{slots[0].raw_value().data<float>(),
                               slots[1].raw_value().data<float>()};
  std::vector<float*> out{slots[0].raw_value().data<float>(), slots[1].raw_value().data<float>()};
  float* wp = w.raw_value().data<float>();
  const auto n = static_cast<size_t>(w.num_elements());
  const distribute::RoundedOut rounded{.bf16 = copy.empty() ? nullptr : copy.data(),
                                       .layout = layout};
  for (auto _ : state) {
    adam.begin_update({});
    adam.apply(0, 0, wp, g.data<float>(), in, wp, out, n, rounded, {});
    adam.end_update();
    benchmark::DoNotOptimize(wp);
  }
  // w, g, m, v in; w, m, v out; and the copy.
  label(state, copy.empty() ? 28 : 30, static_cast<int64_t>(n));
}

// The seed model's weights as one variable; argument 1 also writes the bfloat16 copy.
void BM_AdamUpdate(benchmark::State& state) {
  std::vector<bfloat16> copy(state.range(0) == 1 ? kSeedParameters : 0);
  adam_steps(state, {kSeedParameters}, copy, nullptr);
}
BENCHMARK(BM_AdamUpdate)->Arg(0)->Arg(1);

// Adam over the seed model's first kernel (784 x 128) with its bfloat16 copy: argument 0 plain,
// 1 in the paired-rows layout oneDNN's AMX kernel reads it in (BA16a64b2a, rows padded to 800).
void BM_AdamUpdateKernelCopy(benchmark::State& state) {
  constexpr int64_t kIn = 784, kOut = 128;
  static const PairedRowsLayout kLayout{.rows = kIn,
                                        .cols = kOut,
                                        .row_block = 32,
                                        .col_block = 64,
                                        .row_tile_stride = 32 * 64,
                                        .col_tile_stride = 800 * 64,
                                        .size = 800 * kOut};
  const bool paired = state.range(0) == 1;
  std::vector<bfloat16> copy(static_cast<size_t>(paired ? kLayout.size : kIn * kOut));
  adam_steps(state, {kIn, kOut}, copy, paired ? &kLayout : nullptr);
}
BENCHMARK(BM_AdamUpdateKernelCopy)->Arg(0)->Arg(1);

// The ViT's attention (apps/models: 49 patches, 4 heads of 16) over 32 examples: the scores, the
// column softmax and the weighted rows, forward and backward. Counted as the flop of its four
// products (2·T·S·D each, per head).
void attention(benchmark::State& state, DType dtype, bool bfloat16_values = false) {
  constexpr int64_t kB = 32, kT = 49, kH = 4, kD = 16;
  Generator gen(5);
  Tensor q = gen.uniform({kB, kT, kH, kD}, -1, 1).to(dtype);
  Tensor k = gen.uniform({kB, kT, kH, kD}, -1, 1).to(dtype);
  Tensor v = gen.uniform({kB, kT, kH, kD}, -1, 1).to(dtype);
  Tensor dy = gen.uniform({kB, kT, kH, kD}, -1, 1).to(dtype);
  const ops::AttentionOptions options{.bfloat16_values = bfloat16_values};
  for (auto _ : state) {
    Tensor y = ops::dot_product_attention_forward(q, k, v, options);
    benchmark::DoNotOptimize(ops::dot_product_attention_backward(dy, q, k, v, options));
    benchmark::DoNotOptimize(y);
  }
  state.SetLabel(std::string(loop_isa_name(loop_isa())));
  state.counters["GFLOP/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 6 * 2 * kB * kH * kT * kT * kD,
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
void BM_AttentionFloat32(benchmark::State& state) {
  attention(state, DType::float32);
}
BENCHMARK(BM_AttentionFloat32);
void BM_AttentionBfloat16(benchmark::State& state) {
  attention(state, DType::bfloat16);
}
BENCHMARK(BM_AttentionBfloat16);
// mixed_bfloat16's float32 form: float32 kernels storing the output and gradients rounded.
void BM_AttentionBfloat16Values(benchmark::State& state) {
  attention(state, DType::float32, true);
}
BENCHMARK(BM_AttentionBfloat16Values);

// The ViT's layer normalization (width 64) over 128 examples of 49 patches: argument 0 the forward
// pass alone (bytes: x and y), 1 forward and backward (bytes: x, y, dy and dx).
void layer_norm(benchmark::State& state, DType dtype) {
  constexpr int64_t kRows = 128 * 49, kWidth = 64;
  Generator gen(6);
  Tensor x = gen.uniform({kRows, kWidth}, -1, 1).to(dtype);
  Tensor dy = gen.uniform({kRows, kWidth}, -1, 1).to(dtype);
  Tensor gamma = gen.uniform({kWidth}, 0.5, 1.5), beta = gen.uniform({kWidth}, -1, 1);
  for (auto _ : state) {
    ops::LayerNormResult r = ops::layer_norm_forward(x, gamma, beta);
    if (state.range(0))
      benchmark::DoNotOptimize(ops::layer_norm_backward(dy, x, gamma, r.mean, r.inv_std));
    benchmark::DoNotOptimize(r.output);
  }
  label(state, (state.range(0) ? 4.0 : 2.0) * static_cast<double>(dtype_size(dtype)),
        kRows * kWidth);
}
void BM_LayerNormFloat32(benchmark::State& state) {
  layer_norm(state, DType::float32);
}
BENCHMARK(BM_LayerNormFloat32)->Arg(0)->Arg(1);
void BM_LayerNormBfloat16(benchmark::State& state) {
  layer_norm(state, DType::bfloat16);
}
BENCHMARK(BM_LayerNormBfloat16)->Arg(0)->Arg(1);

// mixed_bfloat16's float32 form at the same shape: first argument 0 rounding in passes of their
// own (the output after the op, the gradient before its backward), 1 in the kernels
// (bfloat16_values); second argument 0 the forward pass alone, 1 forward and backward. Bytes: x,
// y, dy and dx in float32.
void BM_LayerNormBfloat16Values(benchmark::State& state) {
  constexpr int64_t kRows = 128 * 49, kWidth = 64;
  Generator gen(6);
  Tensor x = ops::to_bfloat16_values_forward(gen.uniform({kRows, kWidth}, -1, 1));
  Tensor gamma = gen.uniform({kWidth}, 0.5, 1.5), beta = gen.uniform({kWidth}, -1, 1);
  const Tensor upstream = gen.uniform({kRows, kWidth}, -1, 1);
  const bool fused = state.range(0) != 0;
  for (auto _ : state) {
    state.PauseTiming();
    Tensor dy = upstream.clone();  // a fresh gradient, as the tape hands one over
    state.ResumeTiming();
    ops::LayerNormResult r = ops::layer_norm_forward(x, gamma, beta, 1e-3, fused);
    Tensor y = fused ? r.output : ops::to_bfloat16_values_forward(r.output, true);
    if (state.range(1)) {
      if (!fused) dy = ops::to_bfloat16_values_backward(dy);
      benchmark::DoNotOptimize(ops::layer_norm_backward(dy, x, gamma, r.mean, r.inv_std, fused));
    }
    benchmark::DoNotOptimize(y);
  }
  label(state, state.range(1) ? 16.0 : 8.0, kRows * kWidth);
}
BENCHMARK(BM_LayerNormBfloat16Values)->Args({0, 0})->Args({1, 0})->Args({0, 1})->Args({1, 1});

}  // namespace
}  // namespace lockstep

BENCHMARK_MAIN();
