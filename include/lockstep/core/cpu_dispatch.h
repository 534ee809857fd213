#pragma once
// LOCKSTEP_TARGET_CLONES: build a hot loop for AVX-512 as well as baseline x86-64 and pick the
// version at load time (GCC's target_clones). The library targets any x86-64, but the loops that
// are not oneDNN's (Adam's update, bf16 conversions, relu) gain 2-4x from AVX-512.
//
// Under ASan/TSan the clones are off: their ifunc resolvers run during dynamic relocation, before
// the sanitizer runtime is initialised, and instrumented resolvers crash there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LOCKSTEP_TARGET_CLONES
#else
#define LOCKSTEP_TARGET_CLONES __attribute__((target_clones("avx512f", "default")))
#endif
