// LocalCpuResolver and AcceleratorClusterResolver (the CPU topology they rest on is tested in
// tests/core/cpu_cores_test.cpp).
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "lockstep/core/cpu_cores.h"
#include "lockstep/core/error.h"
#include "lockstep/distribute/cluster_resolver.h"
#include "lockstep/distribute/device.h"

namespace lockstep {
namespace {

const Environment kNoVariables = Environment::fixed({});

// Sets (or unsets) one process environment variable and restores it on destruction.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

TEST(DeviceKind, PrintsAndParsesItsNames) {
  for (DeviceKind kind : {DeviceKind::cpu, DeviceKind::cuda, DeviceKind::tpu}) {
    EXPECT_EQ(parse_device_kind(device_kind_name(kind)), kind);
  }
  EXPECT_EQ(device_kind_name(DeviceKind::tpu), "tpu");
  EXPECT_THROW(parse_device_kind("gpu"), InvalidArgument);
  EXPECT_THROW(parse_device_kind("CPU"), InvalidArgument);
}

TEST(DeviceSpec, NameFollowsTensorFlowDeviceNames) {
  DeviceSpec device{.kind = DeviceKind::cpu, .index = 3, .cores = {3}};
  EXPECT_EQ(device.name(), "/job:worker/task:0/device:cpu:3");
  device.task = 2;
  device.job = "chief";
  EXPECT_EQ(device.name(), "/job:chief/task:2/device:cpu:3");
}

TEST(LocalCpuResolver, HonoursTheCallingThreadsAffinityMask) {
  // sched_getaffinity(0) reads the calling thread, so a thread restricted to one core must
  // resolve exactly that core. A fresh thread keeps the test thread's mask untouched.
  const int first_core = available_cores().front();
  std::vector<int> seen;
  std::vector<DeviceSpec> devices;
  std::thread([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first_core, &one);
    ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(one), &one), 0);
    seen = available_cores();
    devices = LocalCpuResolver({}, kNoVariables).local_devices();
  }).join();
  EXPECT_EQ(seen, std::vector<int>{first_core});
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].cores, std::vector<int>{first_core});
}

TEST(LocalCpuResolver, PresentsOneReplicaPerCoreByDefault) {
  LocalCpuResolver resolver({.cores = {0, 1, 2, 3}}, kNoVariables);
  ASSERT_EQ(resolver.num_accelerators(), 4);
  const auto devices = resolver.local_devices();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(devices[i].index, i);
    EXPECT_EQ(devices[i].kind, DeviceKind::cpu);
    EXPECT_EQ(devices[i].cores, std::vector<int>{i});
  }
  EXPECT_EQ(resolver.master(), "");
  EXPECT_EQ(resolver.task_type(), "worker");
  EXPECT_EQ(resolver.task_id(), 0);
  EXPECT_EQ(resolver.num_workers(), 1);
  EXPECT_EQ(resolver.rpc_layer(), "");
  EXPECT_EQ(resolver.cluster_spec().num_tasks("worker"), 1);
}

TEST(LocalCpuResolver, GroupsCoresPerReplica) {
  LocalCpuResolver resolver({.cores_per_replica = 2, .cores = {0, 1, 2, 3, 4}}, kNoVariables);
  const auto devices = resolver.local_devices();
  ASSERT_EQ(devices.size(), 2u);  // the fifth core is left over, not half a replica
  EXPECT_EQ(devices[0].cores, (std::vector<int>{0, 1}));
  EXPECT_EQ(devices[1].cores, (std::vector<int>{2, 3}));
}

TEST(LocalCpuResolver, UsesTheCurrentProcessCoresWhenNoneAreGiven) {
  LocalCpuResolver resolver({}, kNoVariables);
  EXPECT_EQ(resolver.num_accelerators(), static_cast<int>(available_cores().size()));
}

TEST(LocalCpuResolver, LockstepDevicesPresentsVirtualReplicas) {
  ScopedEnv devices("LOCKSTEP_DEVICES", "cpu:8");
  testing::internal::CaptureStderr();
  LocalCpuResolver resolver;
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(resolver.num_accelerators(), 8);
  EXPECT_EQ(resolver.local_devices().size(), 8u);
}

TEST(LocalCpuResolver, OversubscribedReplicasShareCoresRoundRobinAndWarn) {
  testing::internal::CaptureStderr();
  LocalCpuResolver resolver({.cores = {4, 6}}, Environment::fixed({{"LOCKSTEP_DEVICES", "cpu:5"}}));
  const std::string warning = testing::internal::GetCapturedStderr();
  const auto devices = resolver.local_devices();
  ASSERT_EQ(devices.size(), 5u);
  const std::vector<int> expected = {4, 6, 4, 6, 4};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(devices[i].cores, std::vector<int>{expected[i]});
  EXPECT_NE(warning.find("oversubscribed"), std::string::npos) << warning;
  EXPECT_NE(warning.find("LOCKSTEP_DEVICES"), std::string::npos) << warning;
}

TEST(LocalCpuResolver, DoesNotWarnWhenReplicasFitTheCores) {
  testing::internal::CaptureStderr();
  LocalCpuResolver resolver({.cores = {0, 1, 2}},
                            Environment::fixed({{"LOCKSTEP_DEVICES", "cpu:2"}}));
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(resolver.num_accelerators(), 2);
}

TEST(LocalCpuResolver, ExplicitNumReplicasWinsOverLockstepDevices) {
  LocalCpuResolver resolver({.num_replicas = 2, .cores = {0, 1}},
                            Environment::fixed({{"LOCKSTEP_DEVICES", "cpu:8"}}));
  EXPECT_EQ(resolver.num_accelerators(), 2);
}

TEST(LocalCpuResolver, RejectsMalformedLockstepDevicesNamingTheValue) {
  for (const char* value : {"cpu:0", "cpu:-2", "cpu:two", "cpu:", "gpu:2", "8"}) {
    try {
      LocalCpuResolver({.cores = {0}}, Environment::fixed({{"LOCKSTEP_DEVICES", value}}));
      ADD_FAILURE() << "accepted LOCKSTEP_DEVICES=" << value;
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find(value), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find("LOCKSTEP_DEVICES"), std::string::npos);
    }
  }
}

TEST(LocalCpuResolver, LockstepDevicesForAnAbsentKindIsNotFound) {
  EXPECT_THROW(
      LocalCpuResolver({.cores = {0}}, Environment::fixed({{"LOCKSTEP_DEVICES", "cuda:2"}})),
      NotFound);
}

TEST(LocalCpuResolver, RejectsBadOptions) {
  EXPECT_THROW(LocalCpuResolver({.num_replicas = -1}, kNoVariables), InvalidArgument);
  EXPECT_THROW(LocalCpuResolver({.cores_per_replica = 0}, kNoVariables), InvalidArgument);
  EXPECT_THROW(LocalCpuResolver({.cores = {1, 1}}, kNoVariables), InvalidArgument);
  EXPECT_THROW(LocalCpuResolver({.cores = {-3}}, kNoVariables), InvalidArgument);
}

TEST(AcceleratorClusterResolver, AutoAndCpuResolveThisHostsCores) {
  AcceleratorClusterResolver automatic({.devices = {.cores = {0, 1}}}, kNoVariables);
  EXPECT_EQ(automatic.kind(), DeviceKind::cpu);
  EXPECT_EQ(automatic.num_accelerators(), 2);
  AcceleratorClusterResolver cpu({.kind = "cpu", .devices = {.cores = {0, 1, 2}}}, kNoVariables);
  EXPECT_EQ(cpu.num_accelerators(), 3);
  EXPECT_EQ(cpu.num_workers(), 1);
}

TEST(AcceleratorClusterResolver, AbsentKindsThrowNotFoundSayingWhatToDo) {
  for (DeviceKind kind : {DeviceKind::cuda, DeviceKind::tpu}) {
    try {
      AcceleratorClusterResolver resolver(kind, kNoVariables);
      ADD_FAILURE() << "resolved " << device_kind_name(kind);
    } catch (const NotFound& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("No " + std::string(device_kind_name(kind)) + " devices found"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("get_strategy()"), std::string::npos) << message;
      EXPECT_EQ(error.code(), StatusCode::not_found);
    }
  }
}

TEST(AcceleratorClusterResolver, SeedFlowFallsBackOnNotFound) {
  // The seed program's try/except: the fallback branch must be reachable and the only one taken.
  bool resolved = false;
  bool fell_back = false;
  try {
    AcceleratorClusterResolver resolver({.kind = "tpu"});
    resolved = true;
  } catch (const NotFound&) {
    fell_back = true;
  }
  EXPECT_FALSE(resolved);
  EXPECT_TRUE(fell_back);
}

TEST(AcceleratorClusterResolver, UnknownKindIsInvalidArgumentNamingIt) {
  try {
    AcceleratorClusterResolver resolver({.kind = "gpu"}, kNoVariables);
    ADD_FAILURE() << "accepted kind gpu";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("kind=\"gpu\""), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace lockstep
