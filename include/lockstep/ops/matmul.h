#pragma once
// Matrix multiplication, forward and backward.
//
//   op(a) = transpose_a ? aᵀ : a,   op(b) = transpose_b ? bᵀ : b
//   y = op(a) · op(b)               op(a): [m, k], op(b): [k, n], y: [m, n]
//
// Rank-2 operands only. float32 and bfloat16 run through oneDNN (bf16 inputs accumulate in
// float32; the output may be bfloat16 or float32); float64 runs a plain loop (for gradient checks).
// Both operands must have the same dtype. Transposes are free: oneDNN reads the operand through
// strides, nothing is copied.
#include "lockstep/core/tensor.h"

namespace lockstep::ops {

// y = op(a)·op(b), in a's dtype.
Tensor matmul_forward(const Tensor& a, const Tensor& b, bool transpose_a = false,
                      bool transpose_b = false);
// Writes op(a)·op(b) into `out` ([m, n]; dtype a's, or float32 when a and b are bfloat16).
void matmul_into(const Tensor& a, const Tensor& b, const Tensor& out, bool transpose_a = false,
                 bool transpose_b = false);

// Gradients of y = op(a)·op(b) given dy = dL/dy ([m, n]):
//   dL/dop(a) = dy · op(b)ᵀ,  dL/dop(b) = op(a)ᵀ · dy; transposed back when transpose_a/_b.
// Each is undefined when not requested.
struct MatmulGrads {
  Tensor da, db;
};
// How matmuls of bfloat16 operands run: with oneDNN's bfloat16 kernels, or "store bfloat16,
// compute float32" (widen the operands, run the float32 kernel, round the result). Which is
// faster depends on the CPU and the shape: the bfloat16 dot product (vdpbf16ps) runs at twice the
// float32 FMA rate on AMD Zen 4, at half of it on Intel cores without AMX, and AMX tiles run many
// times faster still. measured (the default) measures both kernels once per shape, the first time a
// shape is multiplied, and keeps the faster for the rest of the process (the bfloat16 kernels
// only when at least 10% faster, so that close calls do not flip between runs). The other two
// force one path, for reproducibility across machines and for tests. The environment variable
// LOCKSTEP_BF16_MATMUL=auto|bf16|f32 sets the starting mode. Where oneDNN has no bfloat16 kernels
// (a CPU below AVX512_CORE, or a cap: lockstep/core/cpu_isa.h) every mode computes in float32.
enum class Bf16MatmulMode { measured, float32_compute, bfloat16_kernels };
void set_bf16_matmul_mode(Bf16MatmulMode mode);
Bf16MatmulMode bf16_matmul_mode();
// True when a bfloat16 op(a)[m, k] · op(b)[k, n] is computed by widening to float32.
bool bf16_matmul_computes_in_f32(int64_t m, int64_t k, int64_t n, bool transpose_a = false,
                                 bool transpose_b = false);
// Whether mixed_bfloat16 layers take the policy's float32 form here
// (keras::Layer::computes_bfloat16_in_float32): where oneDNN has no bfloat16 kernels, and, in the
// measured mode, where its bfloat16 matmul kernel does not run a compute-bound product
// (256 x 256 x 256) in under 3/4 of its float32 kernel's time, measured once per process — an
// Intel core without AMX, whose vdpbf16ps runs at half the FMA rate. There the matmuls would
// mostly widen their operands anyway, and bfloat16 activations would only add a widening before
// and a narrowing after each of them. The forced modes keep bfloat16 activations.
bool mixed_bfloat16_computes_in_f32();

// A float32 product aᵀ·b with nothing fused — a dense layer's weight gradient, the last large
// product of a replica's backward pass — runs in blocks of its output's rows, which idle threads
// of the training step may take (src/core/shared_blocks.h): one block per `macs_per_block`
// multiply-adds, each at least `min_rows` rows (a multiple of 16 from 16 up), at most 8. Every
// block repacks b, so blocks stay large. The split depends on the shape alone. Process-wide; the
// defaults suit the cores measured (docs/performance.md); tests force small blocks.
struct WeightGradientBlocking {
  int64_t macs_per_block = int64_t{4} << 20;
  int64_t min_rows = 256;
};
void set_weight_gradient_blocking(WeightGradientBlocking blocking);
WeightGradientBlocking weight_gradient_blocking();
// Whether threads done with their replica take those blocks from a replica still running (the
// split, and so the bits, are the same either way). A block taken moves its columns of x, all of dz
// and its rows of the gradient between the two cores' caches, and the owner's next step writes
// those lines back: where the cores' caches are far apart (the AMD CPUs measured) that costs more
// than the balance buys, where they share a last-level cache (the Intel Xeons measured) less.
// Process-wide; unset, the CPU's vendor decides (docs/performance.md, "Measured design choices").
void set_share_weight_gradient_blocks(bool on);
bool share_weight_gradient_blocks();
// How many blocks of how many rows an [m, n] weight gradient over k examples runs in.
struct RowBlocks {
  int blocks = 1;
  int64_t rows = 0;
};
RowBlocks weight_gradient_blocks(int64_t m, int64_t n, int64_t k);

MatmulGrads matmul_backward(const Tensor& dy, const Tensor& a, const Tensor& b, bool transpose_a,
                            bool transpose_b, bool need_da = true, bool need_db = true);

}  // namespace lockstep::ops
