#pragma once
// The instruction sets Lockstep may use, and the one cap that limits them all.
//
// Lockstep's own loops (Adam's update, the bfloat16 conversions, relu, ...) are built three times —
// for baseline x86-64, for x86-64-v3 (AVX2, FMA) and for x86-64-v4 (AVX-512 F/BW/CD/DQ/VL) — and
// oneDNN picks its kernels from the CPU. Both obey one cap, read once, at first use:
//
//   LOCKSTEP_MAX_CPU_ISA if set, else ONEDNN_MAX_CPU_ISA, else no cap (ALL)
//
// with oneDNN's names: SSE41, AVX, AVX2, AVX2_VNNI, AVX512_CORE, AVX512_CORE_VNNI,
// AVX512_CORE_BF16, AVX512_CORE_AMX, ALL. The ops layer hands the cap to oneDNN
// (dnnl::set_max_cpu_isa) before its first primitive, so one variable makes a machine run every
// weaker CPU's code paths: an AVX-512 machine proves what an AVX2 one computes.
//
// The loops give the same bits under every cap: they are compiled without floating-point
// contraction (no FMA that the baseline lacks), and their sums keep the scalar order.
//
// On aarch64 the loops are built once, for Advanced SIMD (NEON), the baseline of every ARMv8-A
// core; the level is ASIMD, the only name besides ALL that means anything there (an x86 name caps
// nothing on ARM, and oneDNN 2.6 has no cap on aarch64).
#include <string>
#include <string_view>

namespace lockstep {

// Ordered from weakest to strongest, as oneDNN orders them; `all` means no cap. `asimd` is
// aarch64's level (parsed there only), below every x86 one so that an x86 cap leaves it alone.
enum class CpuIsa {
  asimd,
  sse41,
  avx,
  avx2,
  avx2_vnni,
  avx512_core,
  avx512_core_vnni,
  avx512_core_bf16,
  avx512_core_amx,
  all
};

// oneDNN's spelling: "AVX2", "AVX512_CORE_BF16", "ALL"; "ASIMD" for aarch64.
std::string_view cpu_isa_name(CpuIsa isa);
// Parses oneDNN's names, case-insensitively. Throws InvalidArgument naming `what` (the variable
// read) and listing the accepted names.
CpuIsa parse_cpu_isa(std::string_view name, std::string_view what = "ISA name");

// The cap in force: LOCKSTEP_MAX_CPU_ISA, else ONEDNN_MAX_CPU_ISA, else CpuIsa::all. Read from the
// environment at the first call and kept for the process. An unknown name throws InvalidArgument.
CpuIsa max_cpu_isa();
// Which of the two variables set the cap ("LOCKSTEP_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA"), or "" when
// neither is set.
std::string_view max_cpu_isa_source();

// The strongest of the levels above that this CPU (and its OS) can execute, without the cap.
CpuIsa host_cpu_isa();
// min(host_cpu_isa(), max_cpu_isa()): the level Lockstep's dispatch works at.
CpuIsa effective_cpu_isa();

// The CPU's model name as the kernel reports it (/proc/cpuinfo), or "unknown CPU". On aarch64,
// where /proc/cpuinfo has no model name, the core named from its MIDR_EL1 register ("Arm
// Neoverse-N1"), which Linux (and QEMU's user mode) let a program read.
std::string cpu_model_name();

// Who designed the CPU (x86's CPUID vendor string; `other` on any other architecture). For choices
// of memory traffic whose outcome differs between the vendors' cache designs, and was measured on
// both; no code path that changes results depends on it.
enum class CpuVendor { intel, amd, other };
CpuVendor cpu_vendor();

// Which build of Lockstep's hand-written loops runs here, chosen from effective_cpu_isa().
enum class LoopIsa { baseline, x86_64_v3, x86_64_v4 };
LoopIsa loop_isa();
// "x86-64", "x86-64-v3", "x86-64-v4"; on aarch64 the baseline is "aarch64 (NEON)".
std::string_view loop_isa_name(LoopIsa isa);

}  // namespace lockstep
