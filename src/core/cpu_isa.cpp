#include "lockstep/core/cpu_isa.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <string>

#include "lockstep/core/error.h"

namespace lockstep {
namespace {

struct Named {
  CpuIsa isa;
  std::string_view name;
};
constexpr std::array<Named, 9> kNames{{{CpuIsa::sse41, "SSE41"},
                                       {CpuIsa::avx, "AVX"},
                                       {CpuIsa::avx2, "AVX2"},
                                       {CpuIsa::avx2_vnni, "AVX2_VNNI"},
                                       {CpuIsa::avx512_core, "AVX512_CORE"},
                                       {CpuIsa::avx512_core_vnni, "AVX512_CORE_VNNI"},
                                       {CpuIsa::avx512_core_bf16, "AVX512_CORE_BF16"},
                                       {CpuIsa::avx512_core_amx, "AVX512_CORE_AMX"},
                                       {CpuIsa::all, "ALL"}}};

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
#else
  return CpuIsa::sse41;
#endif
}

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
      return "x86-64";
    case LoopIsa::x86_64_v3:
      return "x86-64-v3";
    case LoopIsa::x86_64_v4:
      return "x86-64-v4";
  }
  return "?";
}

}  // namespace lockstep
