// Prints what this process dispatches to — the host's ISA, the cap, oneDNN's effective ISA, the
// build of Lockstep's loops and whether oneDNN has bfloat16 kernels — as key=value lines for
// run_under_cap.sh, which checks them against the cap it set.
#include <cstdio>
#include <string>

#include "lockstep/core/cpu_isa.h"
#include "lockstep/ops/cpu_kernels.h"

int main() {
  using namespace lockstep;
  std::printf("host=%s\n", std::string(cpu_isa_name(host_cpu_isa())).c_str());
  std::printf("cap=%s\n", std::string(cpu_isa_name(max_cpu_isa())).c_str());
  std::printf("onednn=%s\n", std::string(ops::onednn_cpu_isa()).c_str());
  std::printf("loops=%s\n", std::string(loop_isa_name(loop_isa())).c_str());
  std::printf("bf16=%s\n", ops::has_native_bfloat16_math() ? "native" : "emulated");
  return 0;
}
