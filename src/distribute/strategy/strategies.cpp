#include "lockstep/distribute/strategies.h"

#include <regex>

namespace lockstep::distribute {

StrategyConfig config_for_devices(std::string name, const std::vector<DeviceSpec>& devices,
                                  CommunicationOptions communication) {
  if (devices.empty()) throw InvalidArgument(name + ": needs at least one device.");
  StrategyConfig c;
  c.name = std::move(name);
  c.replica_cores.clear();
  for (const DeviceSpec& d : devices) {
    if (d.kind != DeviceKind::cpu) {
      throw Unavailable(c.name + ": device " + d.name() +
                        " is not a cpu; this build of Lockstep has only the cpu backend.");
    }
    c.replica_cores.push_back(d.cores);
    c.device_names.push_back(d.name());
  }
  c.communication = communication;
  return c;
}

namespace {
DeviceSpec parse_cpu_device(const std::string& device) {
  static const std::regex re(R"((?:.*/)?(?:device:)?(?:cpu|CPU):(\d+))");
  std::smatch m;
  if (!std::regex_match(device, m, re)) {
    throw InvalidArgument(
        "OneDeviceStrategy: expected a cpu device such as \"/cpu:0\". Received: \"" + device +
        "\".");
  }
  int index = std::stoi(m[1]);
  LocalCpuResolver resolver;
  auto devices = resolver.local_devices();
  if (index >= static_cast<int>(devices.size())) {
    throw NotFound("OneDeviceStrategy: device cpu:" + std::to_string(index) +
                   " does not exist; this host has " + std::to_string(devices.size()) +
                   " cpu devices.");
  }
  return devices[static_cast<size_t>(index)];
}
}  // namespace

OneDeviceStrategy::OneDeviceStrategy(const std::string& device)
    : OneDeviceStrategy(parse_cpu_device(device)) {}
OneDeviceStrategy::OneDeviceStrategy(const DeviceSpec& device)
    : Strategy(config_for_devices("OneDeviceStrategy", {device})) {}

MirroredStrategy::MirroredStrategy()
    : Strategy(config_for_devices("MirroredStrategy", LocalCpuResolver().local_devices())) {}
MirroredStrategy::MirroredStrategy(const std::vector<DeviceSpec>& devices,
                                   CommunicationOptions communication)
    : Strategy(config_for_devices("MirroredStrategy", devices, communication)) {}
MirroredStrategy::MirroredStrategy(int num_replicas, CommunicationOptions communication)
    : Strategy(config_for_devices(
          "MirroredStrategy",
          LocalCpuResolver(LocalDeviceOptions{.num_replicas = num_replicas}).local_devices(),
          communication)) {}

AcceleratorStrategy::AcceleratorStrategy(const ClusterResolver& resolver,
                                         CommunicationOptions communication)
    : Strategy(config_for_devices("AcceleratorStrategy", resolver.local_devices(), communication)) {
}

}  // namespace lockstep::distribute
