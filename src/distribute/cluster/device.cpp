#include "lockstep/distribute/device.h"

#include "lockstep/core/error.h"

namespace lockstep {

std::string_view device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cpu:
      return "cpu";
    case DeviceKind::cuda:
      return "cuda";
    case DeviceKind::tpu:
      return "tpu";
  }
  throw Internal("device_kind_name: unknown DeviceKind " + std::to_string(static_cast<int>(kind)));
}

DeviceKind parse_device_kind(std::string_view text) {
  for (DeviceKind kind : {DeviceKind::cpu, DeviceKind::cuda, DeviceKind::tpu}) {
    if (text == device_kind_name(kind)) return kind;
  }
  throw InvalidArgument("Expected a device kind: one of cpu, cuda, tpu. Received: \"" +
                        std::string(text) + "\".");
}

std::string DeviceSpec::name() const {
  return "/job:" + job + "/task:" + std::to_string(task) +
         "/device:" + std::string(device_kind_name(kind)) + ":" + std::to_string(index);
}

}  // namespace lockstep
