// mixed_bfloat16 against float32 on the CLI's MLPs and ViT (`lockstep train --model mlp|wide|vit`):
// the seed model 784-128-10 at batch 128, the wide 784-2048-2048-10 at batch 256 and the ViT
// (apps/models/vit.h) at batch 128 (a replica's share of the global 256), uint8 pixels,
// Rescaling, a float32 softmax output layer, Adam.
//   OMP_NUM_THREADS=1 taskset -c 0 build/release/bench/mixed_precision_bench [--rounds 7]
//       [--steps-seed 200] [--steps-wide 8] [--steps-vit 4] [--model seed|wide|vit|both|all]
//       [--profile float32|mixed_bfloat16]   (only that policy's steps, for perf record)
// (one core, as a replica runs; with two OpenMP threads on a shared machine oneDNN's small
// matmuls wait on each other)
// Prints, per model:
//   - memory, measured (mixed_precision::measure_step_memory: the bytes the gradient tape holds
//     at the end of the forward pass, the step's peak, the persistent rounded weight copies);
//   - the step time (forward, backward, Adam update; one thread, no replica machinery), float32
//     and mixed_bfloat16 interleaved round by round, medians and the ratio.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/keras.h"
#include "lockstep/ops/matmul.h"
#include "models/vit.h"

namespace lockstep {
namespace {

using keras::Sequential;
namespace layers = keras::layers;

struct Setup {
  std::unique_ptr<Sequential> model;
  std::unique_ptr<keras::optimizers::Adam> optimizer;
  std::vector<Variable> vars;
};

enum class Kind { seed, wide, vit };

Setup make(Kind kind, const std::string& policy) {
  keras::mixed_precision::set_global_policy(policy);
  keras::set_random_seed(1);
  std::vector<keras::LayerArg> ls = {keras::Input({784}, DType::uint8),
                                     layers::Rescaling(1.0 / 255)};
  const bool wide = kind == Kind::wide;
  const int64_t hidden = wide ? 2048 : 128;
  if (kind == Kind::vit) {
    ls.push_back(apps::models::vit_encoder());
  } else {
    ls.push_back(layers::Dense({.units = hidden, .activation = "relu"}));
  }
  if (wide) ls.push_back(layers::Dense({.units = hidden, .activation = "relu"}));
  ls.push_back(layers::Dense({.units = 10, .activation = "softmax", .dtype = "float32"}));
  Setup s;
  s.model = std::make_unique<Sequential>(ls);
  keras::mixed_precision::set_global_policy("float32");
  s.optimizer = std::make_unique<keras::optimizers::Adam>();
  return s;
}

void step(Setup& s, const Tensor& x, const Tensor& y, const keras::losses::Loss& loss) {
  GradientTape tape;
  Tensor l = loss(y, (*s.model)(x, /*training=*/true));
  std::vector<Tensor> g = tape.gradient(l, s.vars);
  s.optimizer->apply_gradients(g, s.vars);
}

double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// `profile`: run only that policy's steps (for perf record), no timing table.
void run(const std::string& name, Kind kind, int64_t batch, int steps, int rounds,
         const std::string& profile) {
  const bool wide = kind == Kind::wide;
  Tensor x({batch, 784}, DType::uint8);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    x.data<uint8_t>()[i] = static_cast<uint8_t>((i * 2654435761u) >> 24);
  }
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) labels[static_cast<size_t>(i)] = (i * 7) % 10;
  Tensor y = one_hot(Tensor::from_vector<int64_t>(labels, {batch}), 10);
  keras::losses::CategoricalCrossentropy loss;
  const std::string policies[2] = {"float32", "mixed_bfloat16"};
  Setup setups[2] = {make(kind, policies[0]), make(kind, policies[1])};
  std::printf("%s, batch %ld\n", name.c_str(), static_cast<long>(batch));
  keras::mixed_precision::StepMemory mem[2];
  for (int p = 0; p < 2; ++p) {
    mem[p] = keras::mixed_precision::measure_step_memory(*setups[p].model, x, y, loss);
    setups[p].vars = setups[p].model->trainable_weights();
    std::printf(
        "  %-15s saved for backward %10zu B  step peak %10zu B  rounded weight copies %10zu B\n",
        policies[p].c_str(), mem[p].saved_for_backward, mem[p].step_peak,
        mem[p].rounded_weight_copies);
  }
  std::printf("  saved for backward, mixed / float32: %.3f\n",
              static_cast<double>(mem[1].saved_for_backward) /
                  static_cast<double>(mem[0].saved_for_backward));
  // The kernels the automatic choice picked for the first layer's shape, and the activations
  // alone: with oneDNN's bfloat16 kernels the tape also keeps each layer's bfloat16 weight cast
  // (for its input gradient); store-bf16-compute-f32 keeps persistent rounded float32 copies
  // instead, outside the tape, so its "saved for backward" is the activations only.
  const int64_t hidden = wide ? 2048 : 128;
  if (kind != Kind::vit)
    std::printf("  first layer [%ld x 784] x [784 x %ld] under mixed_bfloat16: %s\n",
                static_cast<long>(batch), static_cast<long>(hidden),
                ops::bf16_matmul_computes_in_f32(batch, 784, hidden)
                    ? "store bfloat16, compute float32"
                    : "oneDNN bfloat16 kernels");
  {
    const ops::Bf16MatmulMode before = ops::bf16_matmul_mode();
    ops::set_bf16_matmul_mode(ops::Bf16MatmulMode::float32_compute);
    Setup f32_compute = make(kind, policies[1]);
    const auto m = keras::mixed_precision::measure_step_memory(*f32_compute.model, x, y, loss);
    ops::set_bf16_matmul_mode(before);
    std::printf(
        "  activations alone (mixed_bfloat16 with store-bf16-compute-f32): %zu B, / float32: "
        "%.3f; bfloat16 weight casts on the tape with oneDNN's kernels: %zu B\n",
        m.saved_for_backward,
        static_cast<double>(m.saved_for_backward) / static_cast<double>(mem[0].saved_for_backward),
        mem[1].saved_for_backward > m.saved_for_backward
            ? mem[1].saved_for_backward - m.saved_for_backward
            : size_t{0});
  }
  for (int p = 0; p < 2; ++p) step(setups[p], x, y, loss);  // warm-up (oneDNN primitives, slots)
  if (!profile.empty()) {
    const int p = profile == policies[0] ? 0 : 1;
    for (int i = 0; i < steps * rounds; ++i) step(setups[p], x, y, loss);
    return;
  }
  // Wall time, and this thread's CPU time: on a shared machine another process taking the core
  // inflates the first but not (much) the second.
  std::vector<double> t[2], c[2], ratios, cpu_ratios;
  // The order alternates round by round, so that neither policy always runs in the caches (and
  // the core's state) the other left.
  for (int r = 0; r < rounds; ++r) {
    double us[2], cpu[2];
    for (int q = 0; q < 2; ++q) {
      const int p = r % 2 == 0 ? q : 1 - q;
      const double c0 = thread_cpu_us();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) step(setups[p], x, y, loss);
      auto t1 = std::chrono::steady_clock::now();
      cpu[p] = (thread_cpu_us() - c0) / steps;
      us[p] = std::chrono::duration<double, std::micro>(t1 - t0).count() / steps;
      t[p].push_back(us[p]);
      c[p].push_back(cpu[p]);
    }
    if (std::getenv("MP_BENCH_VERBOSE"))
      std::printf("    round %d: %.1f %.1f us\n", r, us[0], us[1]);
    ratios.push_back(us[1] / us[0]);
    cpu_ratios.push_back(cpu[1] / cpu[0]);
  }
  std::printf(
      "  wall us/step (median of %d rounds x %d steps): float32 %.1f  mixed_bfloat16 %.1f  "
      "ratio %.3f  median of the per-round ratios %.3f  per round:",
      rounds, steps, median(t[0]), median(t[1]), median(t[1]) / median(t[0]), median(ratios));
  for (double q : ratios) std::printf(" %.3f", q);
  std::printf(
      "\n  cpu us/step: float32 %.1f  mixed_bfloat16 %.1f  ratio %.3f  median of the per-round "
      "ratios %.3f  per round:",
      median(c[0]), median(c[1]), median(c[1]) / median(c[0]), median(cpu_ratios));
  for (double q : cpu_ratios) std::printf(" %.3f", q);
  std::printf("\n");
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  int rounds = 7, steps_seed = 200, steps_wide = 8, steps_vit = 4;
  std::string only = "both", profile;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (a == "--model") only = argv[i + 1];
    if (a == "--profile") profile = argv[i + 1];
    if (a == "--rounds") rounds = v;
    if (a == "--steps-seed") steps_seed = v;
    if (a == "--steps-wide") steps_wide = v;
    if (a == "--steps-vit") steps_vit = v;
  }
  using lockstep::Kind;
  const bool all = only == "all";
  if (all || only == "both" || only == "seed")
    lockstep::run("seed 784-128-10", Kind::seed, 128, steps_seed, rounds, profile);
  if (all || only == "both" || only == "wide")
    lockstep::run("wide 784-2048-2048-10", Kind::wide, 256, steps_wide, rounds, profile);
  if (all || only == "vit") lockstep::run("vit", Kind::vit, 128, steps_vit, rounds, profile);
}
