#pragma once
// A device is a set of compute cores with a kind. Only `cpu` has a backend today; `cuda` and `tpu`
// exist so that code written against the enum (and a resolver asked for them) already compiles and
// fails with NotFound, the way TensorFlow's resolvers fail on a host without the hardware.
#include <string>
#include <string_view>
#include <vector>

namespace lockstep {

enum class DeviceKind { cpu, cuda, tpu };

// "cpu", "cuda", "tpu".
std::string_view device_kind_name(DeviceKind kind);
// Inverse of device_kind_name (exact, lower case). Throws InvalidArgument naming the received text
// and the accepted names.
DeviceKind parse_device_kind(std::string_view text);

// One replica's device: a kind, its index among this worker's devices, and the OS cpu ids
// (as in sched_setaffinity) the replica thread is pinned to. `cores` may share ids with other
// devices when replicas are oversubscribed (LOCKSTEP_DEVICES=cpu:8 on 2 cores).
struct DeviceSpec {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  std::vector<int> cores;
  std::string job = "worker";  // the task type of the worker owning the device
  int task = 0;                // that worker's task id within `job`

  // TensorFlow-style name: "/job:worker/task:0/device:cpu:0".
  std::string name() const;
  bool operator==(const DeviceSpec&) const = default;
};

}  // namespace lockstep
