// The ISA cap (core/cpu_isa.h): oneDNN's names parse, an unknown one is a clear error, the level
// Lockstep works at is the host's cut by the cap, and the conversion loops — built for x86-64,
// x86-64-v3 and x86-64-v4 — give the bits of the scalar definition (the isa label runs this file
// under every cap, so each build is checked against the same scalar bits).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/cpu_isa.h"
#include "lockstep/core/error.h"

namespace lockstep {
namespace {

TEST(CpuIsa, ParsesOneDnnsNamesInAnyCase) {
  EXPECT_EQ(parse_cpu_isa("SSE41"), CpuIsa::sse41);
  EXPECT_EQ(parse_cpu_isa("avx2"), CpuIsa::avx2);
  EXPECT_EQ(parse_cpu_isa("Avx512_Core_Bf16"), CpuIsa::avx512_core_bf16);
  EXPECT_EQ(parse_cpu_isa("AVX512_CORE_AMX"), CpuIsa::avx512_core_amx);
  EXPECT_EQ(parse_cpu_isa("ALL"), CpuIsa::all);
  for (CpuIsa isa :
       {CpuIsa::sse41, CpuIsa::avx, CpuIsa::avx2, CpuIsa::avx2_vnni, CpuIsa::avx512_core,
        CpuIsa::avx512_core_vnni, CpuIsa::avx512_core_bf16, CpuIsa::avx512_core_amx, CpuIsa::all}) {
    EXPECT_EQ(parse_cpu_isa(cpu_isa_name(isa)), isa) << cpu_isa_name(isa);
  }
}

TEST(CpuIsa, AnUnknownNameIsAClearErrorListingTheAcceptedOnes) {
  try {
    parse_cpu_isa("AVX9", "LOCKSTEP_MAX_CPU_ISA");
    FAIL() << "AVX9 was accepted";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("LOCKSTEP_MAX_CPU_ISA"), std::string::npos) << what;
    EXPECT_NE(what.find("\"AVX9\""), std::string::npos) << what;
    EXPECT_NE(what.find("AVX512_CORE_BF16"), std::string::npos) << what;
  }
  EXPECT_THROW(parse_cpu_isa(""), InvalidArgument);
}

TEST(CpuIsa, TheEffectiveLevelIsTheHostsCutByTheCap) {
  EXPECT_EQ(effective_cpu_isa(), std::min(host_cpu_isa(), max_cpu_isa()));
  const CpuIsa isa = effective_cpu_isa();
  const LoopIsa loops = loop_isa();
  // The loops never use an ISA above the effective level.
  EXPECT_TRUE(isa >= CpuIsa::avx2 || loops == LoopIsa::baseline) << cpu_isa_name(isa);
  EXPECT_TRUE(isa >= CpuIsa::avx512_core || loops != LoopIsa::x86_64_v4) << cpu_isa_name(isa);
  EXPECT_FALSE(cpu_model_name().empty());
}

std::vector<float> awkward_floats(size_t n) {
  // Ties, values just beside ties, subnormals, infinities, NaNs of both signs, and random ones.
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          1.00390625f,  // 1 + 2^-8: a tie, rounds to even (down)
                          1.01171875f,  // 1 + 3·2^-8: a tie, rounds to even (up)
                          1.0039063f,   // just above the tie: rounds up
                          std::numeric_limits<float>::denorm_min(),
                          -std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits;
  while (v.size() < n) {
    const uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, sizeof f);
    v.push_back(f);
  }
  return v;
}

// bfloat16::round_from_float is the scalar definition (round to nearest even; NaN stays NaN).
// The vendor from CPUID against the kernel's own report of it (/proc/cpuinfo's vendor_id).
TEST(CpuIsa, TheVendorIsTheOneTheKernelReports) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, vendor;
  while (vendor.empty() && std::getline(in, line)) {
    if (line.rfind("vendor_id", 0) == 0) vendor = line.substr(line.find(':') + 2);
  }
#if defined(__x86_64__) || defined(__i386__)
  ASSERT_FALSE(vendor.empty()) << "no vendor_id in /proc/cpuinfo";
  const CpuVendor expected = vendor == "GenuineIntel"   ? CpuVendor::intel
                             : vendor == "AuthenticAMD" ? CpuVendor::amd
                                                        : CpuVendor::other;
  EXPECT_EQ(cpu_vendor(), expected) << vendor;
#else
  EXPECT_EQ(cpu_vendor(), CpuVendor::other) << vendor;
#endif
}

TEST(CpuIsaLoops, ConversionsGiveTheScalarBitsOnEveryBuild) {
  for (size_t n : {size_t{13}, size_t{314}, size_t{4099}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const std::vector<float> x = awkward_floats(n);
    std::vector<bfloat16> narrow(n);
    float_to_bfloat16(x.data(), narrow.data(), n);
    std::vector<float> wide(n), rounded(n);
    bfloat16_to_float(narrow.data(), wide.data(), n);
    round_to_bfloat16_values(x.data(), rounded.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t want = bfloat16::round_from_float(x[i]);
      uint16_t got;
      std::memcpy(&got, &narrow[i], sizeof got);
      ASSERT_EQ(got, want) << "element " << i << " = " << x[i];
      const uint32_t want_wide = static_cast<uint32_t>(want) << 16;
      uint32_t got_wide, got_rounded;
      std::memcpy(&got_wide, &wide[i], sizeof got_wide);
      std::memcpy(&got_rounded, &rounded[i], sizeof got_rounded);
      ASSERT_EQ(got_wide, want_wide) << "element " << i;
      ASSERT_EQ(got_rounded, want_wide) << "element " << i;
    }
  }
}

}  // namespace
}  // namespace lockstep
