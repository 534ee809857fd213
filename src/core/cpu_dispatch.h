#pragma once
// LOCKSTEP_DISPATCHED: one hot loop built for baseline x86-64, x86-64-v3 (AVX2, FMA) and x86-64-v4
// (AVX-512 F/BW/CD/DQ/VL), the build chosen once, at the first call, from lockstep::loop_isa() —
// which obeys LOCKSTEP_MAX_CPU_ISA / ONEDNN_MAX_CPU_ISA (lockstep/core/cpu_isa.h). GCC's
// target_clones cannot obey a cap: its resolvers run during relocation, before main and before any
// variable could be read.
//
//   LOCKSTEP_DISPATCHED(void, relu_f32, (const float* x, float* y, int64_t n), (x, y, n)) {
//     for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
//   }
//
// defines relu_f32 (with the linkage of the scope it is written in) and its three builds; the body
// is written once and inlined into each. Overloads of one name work: each is its own dispatch.
// The builds give the same bits: the library compiles without floating-point contraction
// (lockstep_target_options), so v3/v4 use no FMA that the baseline lacks, and GCC keeps the order
// of floating-point sums when it vectorises.
//
// Why x86-64-v4 and not just avx512f: with BW and VL GCC packs 32-bit lanes into 16-bit ones in
// zmm registers (float32 -> bfloat16 loops; avx512f alone gets ymm code with a permute per store).
//
// On aarch64 each loop is built once, for the architecture's baseline: Advanced SIMD (NEON, four
// float32 lanes) is part of every ARMv8-A core, GCC 12 has no target_clones for aarch64, and SVE
// is not targeted (its vector length varies by core, and QEMU's SVE models hang oneDNN, so nothing
// here could prove it). The body, the macro and the bits are the same as on x86-64.
#include "lockstep/core/cpu_isa.h"

namespace lockstep::detail {

template <typename Fn>
Fn choose_loop(Fn baseline, Fn x86_64_v3, Fn x86_64_v4) {
  switch (loop_isa()) {
    case LoopIsa::x86_64_v4:
      return x86_64_v4;
    case LoopIsa::x86_64_v3:
      return x86_64_v3;
    case LoopIsa::baseline:
      break;
  }
  return baseline;
}

}  // namespace lockstep::detail

#if defined(__x86_64__)
#define LOCKSTEP_TARGET_X86_64_V3 __attribute__((target("arch=x86-64-v3")))
#define LOCKSTEP_TARGET_X86_64_V4 __attribute__((target("arch=x86-64-v4")))

#define LOCKSTEP_DISPATCHED(ret, name, params, args)                                            \
  [[gnu::always_inline]] static inline ret name##_body params;                                  \
  namespace {                                                                                   \
  ret name##_x86_64 params {                                                                    \
    return name##_body args;                                                                    \
  }                                                                                             \
  LOCKSTEP_TARGET_X86_64_V3 ret name##_x86_64_v3 params {                                       \
    return name##_body args;                                                                    \
  }                                                                                             \
  LOCKSTEP_TARGET_X86_64_V4 ret name##_x86_64_v4 params {                                       \
    return name##_body args;                                                                    \
  }                                                                                             \
  }                                                                                             \
  ret name params {                                                                             \
    using Fn = ret(*) params;                                                                   \
    static const Fn chosen =                                                                    \
        ::lockstep::detail::choose_loop<Fn>(name##_x86_64, name##_x86_64_v3, name##_x86_64_v4); \
    return chosen args;                                                                         \
  }                                                                                             \
  [[gnu::always_inline]] inline ret name##_body params

// LOCKSTEP_DISPATCHED_LANES: as LOCKSTEP_DISPATCHED, for a body written over GCC vector types of
// the build's native width. The body is a template on kFloatLanes — the float32 lanes of one
// register: 4 (SSE2), 8 (AVX2), 16 (AVX-512) — so that a vector is one register in every build:
// a 64-byte vector in the AVX2 build would be lowered through the stack (every broadcast a
// store), and blocks sized for AVX-512's 32 registers spill in AVX2's 16.
//
//   LOCKSTEP_DISPATCHED_LANES(void, scale_f32, (float* x, int64_t n), (x, n)) {
//     typedef float V __attribute__((vector_size(4 * kFloatLanes)));
//     ...
//   }
#define LOCKSTEP_DISPATCHED_LANES(ret, name, params, args)                                      \
  template <int kFloatLanes>                                                                    \
  [[gnu::always_inline]] static inline ret name##_body params;                                  \
  namespace {                                                                                   \
  ret name##_x86_64 params {                                                                    \
    return name##_body<4> args;                                                                 \
  }                                                                                             \
  LOCKSTEP_TARGET_X86_64_V3 ret name##_x86_64_v3 params {                                       \
    return name##_body<8> args;                                                                 \
  }                                                                                             \
  LOCKSTEP_TARGET_X86_64_V4 ret name##_x86_64_v4 params {                                       \
    return name##_body<16> args;                                                                \
  }                                                                                             \
  }                                                                                             \
  ret name params {                                                                             \
    using Fn = ret(*) params;                                                                   \
    static const Fn chosen =                                                                    \
        ::lockstep::detail::choose_loop<Fn>(name##_x86_64, name##_x86_64_v3, name##_x86_64_v4); \
    return chosen args;                                                                         \
  }                                                                                             \
  template <int kFloatLanes>                                                                    \
  [[gnu::always_inline]] inline ret name##_body params

#else  // one build: the architecture's baseline (aarch64: NEON)

#define LOCKSTEP_DISPATCHED(ret, name, params, args)           \
  [[gnu::always_inline]] static inline ret name##_body params; \
  ret name params {                                            \
    return name##_body args;                                   \
  }                                                            \
  [[gnu::always_inline]] inline ret name##_body params

// kFloatLanes 4: one 128-bit NEON register.
#define LOCKSTEP_DISPATCHED_LANES(ret, name, params, args)     \
  template <int kFloatLanes>                                   \
  [[gnu::always_inline]] static inline ret name##_body params; \
  ret name params {                                            \
    return name##_body<4> args;                                \
  }                                                            \
  template <int kFloatLanes>                                   \
  [[gnu::always_inline]] inline ret name##_body params

#endif
