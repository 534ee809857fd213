#include "lockstep/distribute/strategies.h"

#include <algorithm>
#include <cctype>

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
// Accepts "cpu:N", "/cpu:N", "CPU:N" and TensorFlow's "/job:.../device:cpu:N". (Parsed by hand:
// GCC 12 warns inside <regex> under the sanitizer builds.)
DeviceSpec parse_cpu_device(const std::string& device) {
  std::string lower;
  for (char c : device) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t at = lower.rfind("cpu:");
  bool prefix_ok = at != std::string::npos &&
                   (at == 0 || lower[at - 1] == '/' || lower.compare(0, at, "device:") == 0 ||
                    (at >= 7 && lower.compare(at - 7, 7, "device:") == 0));
  std::string digits = at == std::string::npos ? "" : lower.substr(at + 4);
  bool digits_ok = !digits.empty() && digits.size() < 9 &&
                   std::all_of(digits.begin(), digits.end(),
                               [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (!prefix_ok || !digits_ok) {
    throw InvalidArgument(
        "OneDeviceStrategy: expected a cpu device such as \"/cpu:0\". Received: \"" + device +
        "\".");
  }
  int index = std::stoi(digits);
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
