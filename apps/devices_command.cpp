#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "lockstep/distribute/cluster_resolver.h"
#include "lockstep/distribute/topology.h"

namespace lockstep::apps {

std::function<int()> add_devices_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "Print the devices and replicas Lockstep resolves");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print JSON instead of text");
  return [json] {
    auto resolver = resolve_cluster();
    Topology t = initialize_system(*resolver);
    if (*json) {
      std::cout << t.to_json().dump(2) << "\n";
    } else {
      std::cout << t.to_string();
    }
    return 0;
  };
}

}  // namespace lockstep::apps
