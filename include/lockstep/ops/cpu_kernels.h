#pragma once
// What the ops of this process run on: oneDNN's instruction set under Lockstep's cap
// (lockstep/core/cpu_isa.h), and how bfloat16 math runs.
//
// bfloat16 operands take oneDNN's bfloat16 kernels where the CPU has bfloat16 instructions
// (AVX512_CORE_BF16, AMX; matmuls still choose per shape, see bf16_matmul_mode). On aarch64 oneDNN
// 2.6 has no bfloat16 matmul, so bfloat16 is emulated there. oneDNN 2.6 has no
// bfloat16 primitives below AVX512_CORE and emulates them slowly on AVX512_CORE without BF16.
// Elsewhere every op keeps the mixed_bfloat16 numerics — bfloat16-rounded operands and outputs,
// float32 accumulation — and computes in float32 kernels: a bfloat16 value widens to float32
// exactly and a product of two bfloat16 values is exact in float32, so only the order of the sums
// can differ from a bfloat16 kernel.
#include <string>
#include <string_view>

namespace lockstep::ops {

// oneDNN's effective ISA under the cap, by oneDNN's name ("AVX2", "AVX512_CORE_AMX"; on aarch64,
// where oneDNN has no cap, "ASIMD" or "SVE_256" from the CPU's capabilities).
std::string_view onednn_cpu_isa();
// oneDNN's implementation of a float32 matmul here, by its name ("brg:avx512_core", "gemm:jit").
std::string onednn_matmul_kernel();
// True when oneDNN has bfloat16 kernels here.
bool has_native_bfloat16_math();
// One line for users: "bfloat16 math: native (AVX512_CORE_AMX)", the same with "but no faster
// than float32 here" where mixed_bfloat16 takes its float32 form although bfloat16 kernels exist
// (ops::mixed_bfloat16_computes_in_f32, measured), or "bfloat16 emulated in float32 kernels on
// this CPU (AVX2): same numerics, no speed-up".
std::string bfloat16_math_summary();

}  // namespace lockstep::ops
