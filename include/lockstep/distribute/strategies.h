#pragma once
// The concrete strategies of one host (multi-worker: multi_worker_strategy.h).
//
//   OneDeviceStrategy         one replica on one device (tf.distribute.OneDeviceStrategy)
//   MirroredStrategy          one replica per local device (tf.distribute.MirroredStrategy)
//   AcceleratorStrategy       one replica per accelerator core a resolver found: the analogue of
//                             tf.distribute.TPUStrategy(resolver) for whatever accelerator the
//                             resolver reports (CPU cores today)
//
// The default strategy (get_strategy() outside any scope) is in strategy.h.
#include <string>
#include <vector>

#include "lockstep/distribute/cluster_resolver.h"
#include "lockstep/distribute/strategy.h"

namespace lockstep::distribute {

// One replica per device, each pinned to the device's cores.
StrategyConfig config_for_devices(std::string name, const std::vector<DeviceSpec>& devices,
                                  CommunicationOptions communication = {});

class OneDeviceStrategy : public Strategy {
 public:
  // "/cpu:0", "cpu:1", "/job:worker/task:0/device:cpu:0": the N-th local cpu device.
  explicit OneDeviceStrategy(const std::string& device = "/cpu:0");
  explicit OneDeviceStrategy(const DeviceSpec& device);
};

class MirroredStrategy : public Strategy {
 public:
  // One replica per device of LocalCpuResolver (every available core; LOCKSTEP_DEVICES=cpu:N
  // overrides).
  MirroredStrategy();
  explicit MirroredStrategy(const std::vector<DeviceSpec>& devices,
                            CommunicationOptions communication = {});
  // The first `num_replicas` local devices (virtual ones when oversubscribed).
  explicit MirroredStrategy(int num_replicas, CommunicationOptions communication = {});
};

class AcceleratorStrategy : public Strategy {
 public:
  explicit AcceleratorStrategy(const ClusterResolver& resolver,
                               CommunicationOptions communication = {});
};

}  // namespace lockstep::distribute
