#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "lockstep/core/cpu_isa.h"
#include "lockstep/distribute/cluster_resolver.h"
#include "lockstep/distribute/topology.h"
#include "lockstep/ops/cpu_kernels.h"
#include "lockstep/ops/matmul.h"

namespace lockstep::apps {

std::function<int()> add_devices_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "Print the devices and replicas Lockstep resolves");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print JSON instead of text");
  return [json] {
    auto resolver = resolve_cluster();
    Topology t = initialize_system(*resolver);
    // The CPU and what runs on it: oneDNN's ISA and the cap in force (LOCKSTEP_MAX_CPU_ISA, else
    // ONEDNN_MAX_CPU_ISA), Lockstep's loop build, the kernel oneDNN picks for a float32 matmul,
    // how bfloat16 math runs and which form mixed_bfloat16 takes.
    const std::string cap(cpu_isa_name(max_cpu_isa()));
    const std::string cap_source(max_cpu_isa_source());
    if (*json) {
      nlohmann::json j = t.to_json();
      j["cpu"] = {
          {"model", cpu_model_name()},
          {"host_isa", std::string(cpu_isa_name(host_cpu_isa()))},
          {"onednn_isa", std::string(ops::onednn_cpu_isa())},
          {"max_cpu_isa", cap},
          {"max_cpu_isa_from", cap_source},
          {"onednn_matmul", ops::onednn_matmul_kernel()},
          {"loops", std::string(loop_isa_name(loop_isa()))},
          {"bfloat16_math", ops::has_native_bfloat16_math() ? "native" : "emulated"},
          {"mixed_bfloat16_form", ops::mixed_bfloat16_computes_in_f32() ? "float32" : "bfloat16"}};
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << t.to_string();
      std::cout << "cpu: " << cpu_model_name() << " (" << cpu_isa_name(host_cpu_isa()) << ")\n";
      std::cout << "oneDNN ISA: " << ops::onednn_cpu_isa() << "; cap: " << cap
                << (cap_source.empty() ? " (none set)" : " (from " + cap_source + ")")
                << "; Lockstep's loops: " << loop_isa_name(loop_isa()) << "\n";
      std::cout << "oneDNN float32 matmul: " << ops::onednn_matmul_kernel() << "\n";
      std::cout << ops::bfloat16_math_summary() << "\n";
    }
    return 0;
  };
}

}  // namespace lockstep::apps
