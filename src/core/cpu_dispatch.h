#pragma once
// LOCKSTEP_TARGET_CLONES: build a hot loop for AVX-512 as well as baseline x86-64 and pick the
// version at load time (GCC's target_clones). The library targets any x86-64, but the loops that
// are not oneDNN's (Adam's update, bf16 conversions, relu) gain 2-4x from AVX-512.
//
// The clone targets x86-64-v4 (AVX-512 F/BW/CD/DQ/VL), not just avx512f: with BW and VL GCC packs
// 32-bit lanes into 16-bit ones in zmm registers, which made float32 -> bfloat16 loops 2.4x faster
// here (avx512f alone gets ymm code with a permute per store).
//
// Under ASan/TSan the clones are off: their ifunc resolvers run during dynamic relocation, before
// the sanitizer runtime is initialised, and instrumented resolvers crash there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LOCKSTEP_TARGET_CLONES
#else
#define LOCKSTEP_TARGET_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#endif
