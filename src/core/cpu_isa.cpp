#include "lockstep/core/cpu_isa.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <string>

#include "lockstep/core/error.h"

#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>

#include <cstdio>
#endif

namespace lockstep {
namespace {

struct Named {
  CpuIsa isa;
  std::string_view name;
};
constexpr Named kNames[] = {
#if defined(__aarch64__)
    {CpuIsa::asimd, "ASIMD"},
#endif
    {CpuIsa::sse41, "SSE41"},
    {CpuIsa::avx, "AVX"},
    {CpuIsa::avx2, "AVX2"},
    {CpuIsa::avx2_vnni, "AVX2_VNNI"},
    {CpuIsa::avx512_core, "AVX512_CORE"},
    {CpuIsa::avx512_core_vnni, "AVX512_CORE_VNNI"},
    {CpuIsa::avx512_core_bf16, "AVX512_CORE_BF16"},
    {CpuIsa::avx512_core_amx, "AVX512_CORE_AMX"},
    {CpuIsa::all, "ALL"}};

struct Cap {
  CpuIsa isa = CpuIsa::all;
  std::string_view source;
};

Cap read_cap() {
  for (std::string_view var : {"LOCKSTEP_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA"}) {
    const char* value = std::getenv(std::string(var).c_str());
    if (value != nullptr && *value != '\0') return {parse_cpu_isa(value, var), var};
  }
  return {};
}

const Cap& cap() {
  static const Cap c = read_cap();
  return c;
}

CpuIsa detect_host() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("sse4.1"))
    return CpuIsa::sse41;  // below oneDNN's floor: its baseline
  if (!__builtin_cpu_supports("avx")) return CpuIsa::sse41;
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return CpuIsa::avx;
  const bool avx512_core = __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (!avx512_core) return __builtin_cpu_supports("avxvnni") ? CpuIsa::avx2_vnni : CpuIsa::avx2;
  if (!__builtin_cpu_supports("avx512vnni")) return CpuIsa::avx512_core;
  if (!__builtin_cpu_supports("avx512bf16")) return CpuIsa::avx512_core_vnni;
  if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16")) {
    return CpuIsa::avx512_core_bf16;
  }
  return CpuIsa::avx512_core_amx;
#elif defined(__aarch64__)
  return CpuIsa::asimd;  // Advanced SIMD is part of every ARMv8-A core Linux runs on
#else
  return CpuIsa::sse41;
#endif
}

#if defined(__aarch64__)
// The cores Lockstep's users train on (Graviton, Ampere, Apple silicon) and those QEMU models, by
// MIDR_EL1's implementer and part number.
std::string core_name(unsigned implementer, unsigned part) {
  struct Core {
    unsigned implementer, part;
    const char* name;
  };
  static constexpr Core kCores[] = {
      {0x41, 0xd03, "Arm Cortex-A53"},     {0x41, 0xd04, "Arm Cortex-A35"},
      {0x41, 0xd07, "Arm Cortex-A57"},     {0x41, 0xd08, "Arm Cortex-A72"},
      {0x41, 0xd0b, "Arm Cortex-A76"},     {0x41, 0xd0c, "Arm Neoverse-N1"},
      {0x41, 0xd40, "Arm Neoverse-V1"},    {0x41, 0xd49, "Arm Neoverse-N2"},
      {0x41, 0xd4f, "Arm Neoverse-V2"},    {0x41, 0xd8e, "Arm Neoverse-N3"},
      {0x41, 0xd84, "Arm Neoverse-V3"},    {0x46, 0x001, "Fujitsu A64FX"},
      {0xc0, 0xac3, "Ampere AmpereOne"},   {0x61, 0x022, "Apple M1 Icestorm"},
      {0x61, 0x023, "Apple M1 Firestorm"}, {0x61, 0x032, "Apple M2 Blizzard"},
      {0x61, 0x033, "Apple M2 Avalanche"}};
  for (const Core& c : kCores) {
    if (c.implementer == implementer && c.part == part) return c.name;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "aarch64 core (implementer 0x%02x, part 0x%03x)", implementer,
                part);
  return buf;
}

// Linux lets user space read the ID registers (HWCAP_CPUID: it emulates the trapped MRS), and so
// does QEMU's user mode, where /proc/cpuinfo is the x86-64 host's.
std::string aarch64_core() {
  if ((getauxval(AT_HWCAP) & HWCAP_CPUID) == 0) return "";
  uint64_t midr = 0;
  asm volatile("mrs %0, MIDR_EL1" : "=r"(midr));
  return core_name(static_cast<unsigned>(midr >> 24) & 0xff,
                   static_cast<unsigned>(midr >> 4) & 0xfff);
}
#endif

bool host_runs_x86_64_v3() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("x86-64-v3");
#else
  return false;
#endif
}

bool host_runs_x86_64_v4() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("x86-64-v4");
#else
  return false;
#endif
}

}  // namespace

std::string_view cpu_isa_name(CpuIsa isa) {
  for (const Named& n : kNames) {
    if (n.isa == isa) return n.name;
  }
  return "?";
}

CpuIsa parse_cpu_isa(std::string_view name, std::string_view what) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  for (const Named& n : kNames) {
    if (n.name == upper) return n.isa;
  }
  std::string accepted;
  for (const Named& n : kNames) accepted += (accepted.empty() ? "" : ", ") + std::string(n.name);
  throw InvalidArgument(std::string(what) + ": unknown instruction set \"" + std::string(name) +
                        "\". Expected one of oneDNN's names: " + accepted + ".");
}

CpuIsa max_cpu_isa() {
  return cap().isa;
}

std::string_view max_cpu_isa_source() {
  return cap().source;
}

CpuIsa host_cpu_isa() {
  static const CpuIsa host = detect_host();
  return host;
}

CpuIsa effective_cpu_isa() {
  return std::min(host_cpu_isa(), max_cpu_isa());
}

std::string cpu_model_name() {
#if defined(__aarch64__)
  if (std::string core = aarch64_core(); !core.empty()) return core;
#endif
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    const auto start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string("unknown CPU") : line.substr(start);
  }
  return "unknown CPU";
}

CpuVendor cpu_vendor() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_is("amd")) return CpuVendor::amd;
  if (__builtin_cpu_is("intel")) return CpuVendor::intel;
#endif
  return CpuVendor::other;
}

LoopIsa loop_isa() {
  static const LoopIsa chosen = [] {
    const CpuIsa isa = effective_cpu_isa();
    if (isa >= CpuIsa::avx512_core && host_runs_x86_64_v4()) return LoopIsa::x86_64_v4;
    if (isa >= CpuIsa::avx2 && host_runs_x86_64_v3()) return LoopIsa::x86_64_v3;
    return LoopIsa::baseline;
  }();
  return chosen;
}

std::string_view loop_isa_name(LoopIsa isa) {
  switch (isa) {
    case LoopIsa::baseline:
#if defined(__aarch64__)
      return "aarch64 (NEON)";
#else
      return "x86-64";
#endif
    case LoopIsa::x86_64_v3:
      return "x86-64-v3";
    case LoopIsa::x86_64_v4:
      return "x86-64-v4";
  }
  return "?";
}

}  // namespace lockstep
