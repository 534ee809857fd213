// CPU topology: the cores this process may use (affinity mask cut by a CPU quota), their count,
// and pinning a thread.
#include "lockstep/core/cpu_cores.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace lockstep {
namespace {

namespace fs = std::filesystem;

// A temporary directory standing in for /sys/fs/cgroup.
class FakeCgroupRoot {
 public:
  FakeCgroupRoot() {
    std::string pattern = (fs::temp_directory_path() / "lockstep-cgroup-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~FakeCgroupRoot() { fs::remove_all(path_); }
  void write(const fs::path& relative, const std::string& content) const {
    fs::create_directories((path_ / relative).parent_path());
    std::ofstream(path_ / relative) << content << "\n";
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(AvailableCores, IsSortedNonEmptyAndWithinTheAffinityMask) {
  const std::vector<int> cores = available_cores();
  ASSERT_FALSE(cores.empty());
  EXPECT_TRUE(std::is_sorted(cores.begin(), cores.end()));
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
  for (int core : cores) EXPECT_TRUE(CPU_ISSET(core, &mask)) << "core " << core;
}

TEST(PinCurrentThread, RestrictsTheThreadAndAvailableCoresFollows) {
  const int last_core = available_cores().back();
  bool pinned = false;
  std::vector<int> seen;
  std::thread([&] {
    pinned = pin_current_thread({last_core});
    seen = available_cores();
  }).join();
  EXPECT_TRUE(pinned);
  EXPECT_EQ(seen, std::vector<int>{last_core});
}

TEST(UseProcessCores, UnpinsAThreadStartedFromAPinnedOne) {
  const std::vector<int> process = available_cores();
  std::vector<int> inherited, after;
  bool unpinned = false;
  std::thread([&] {
    ASSERT_TRUE(pin_current_thread({process.front()}));
    // A thread started here inherits the one-core mask, as a communication thread started from a
    // pinned replica thread would.
    std::thread([&] {
      inherited = available_cores();
      unpinned = use_process_cores();
      after = available_cores();
    }).join();
  }).join();
  EXPECT_EQ(inherited, std::vector<int>{process.front()});
  EXPECT_TRUE(unpinned);
  EXPECT_EQ(after, process);
}

TEST(PinCurrentThread, WarnsInsteadOfFailingOnAnImpossibleMask) {
  bool pinned = true;
  testing::internal::CaptureStderr();
  std::thread([&] { pinned = pin_current_thread({-1}); }).join();
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(pinned);
  EXPECT_NE(warning.find("warning"), std::string::npos);
}

TEST(CgroupCpuLimit, NoFilesMeansNoLimit) {
  FakeCgroupRoot root;
  EXPECT_EQ(cgroup_cpu_limit(root.path()), std::nullopt);
  EXPECT_EQ(cgroup_cpu_limit(root.path() / "does-not-exist"), std::nullopt);
}

TEST(CgroupCpuLimit, ReadsCgroupV2CpuMaxAsWholeCores) {
  const std::vector<std::pair<std::string, std::optional<int>>> cases = {
      {"max 100000", std::nullopt}, {"150000 100000", 1},      {"200000 100000", 2},
      {"50000 100000", 1},  // a fraction of a core still runs one replica
      {"400000 50000", 8},          {"garbage", std::nullopt}, {"", std::nullopt},
  };
  for (const auto& [content, expected] : cases) {
    FakeCgroupRoot root;
    root.write("cpu.max", content);
    EXPECT_EQ(cgroup_cpu_limit(root.path()), expected) << "cpu.max = \"" << content << "\"";
  }
}

TEST(CgroupCpuLimit, ReadsCgroupV1CfsQuota) {
  FakeCgroupRoot unlimited;
  unlimited.write("cpu/cpu.cfs_quota_us", "-1");
  unlimited.write("cpu/cpu.cfs_period_us", "100000");
  EXPECT_EQ(cgroup_cpu_limit(unlimited.path()), std::nullopt);

  FakeCgroupRoot limited;
  limited.write("cpu,cpuacct/cpu.cfs_quota_us", "300000");
  limited.write("cpu,cpuacct/cpu.cfs_period_us", "100000");
  EXPECT_EQ(cgroup_cpu_limit(limited.path()), 3);
}

TEST(CgroupCpuLimit, TakesTheTightestOfSeveralHierarchies) {
  FakeCgroupRoot root;
  root.write("cpu.max", "400000 100000");
  root.write("cpu/cpu.cfs_quota_us", "200000");
  root.write("cpu/cpu.cfs_period_us", "100000");
  EXPECT_EQ(cgroup_cpu_limit(root.path()), 2);
}

TEST(AvailableCores, AQuotaOfOneCoreLeavesOneCore) {
  FakeCgroupRoot root;
  root.write("cpu.max", "150000 100000");
  const std::vector<int> all = available_cores(root.path().string() + "/none");
  const std::vector<int> limited = available_cores(root.path());
  ASSERT_EQ(limited.size(), 1u);
  EXPECT_EQ(limited[0], all.front());
}

TEST(AvailableCoreCount, CountsTheAvailableCoresAndFollowsAQuota) {
  EXPECT_EQ(available_core_count(), static_cast<int>(available_cores().size()));
  FakeCgroupRoot root;
  root.write("cpu.max", "150000 100000");
  EXPECT_EQ(available_core_count(root.path()), 1);
}

TEST(AvailableCoreCount, CountsTheCallingThreadsMask) {
  const int first_core = available_cores().front();
  int count = 0;
  std::thread([&] {
    ASSERT_TRUE(pin_current_thread({first_core}));
    count = available_core_count();
  }).join();
  EXPECT_EQ(count, 1);
}

}  // namespace
}  // namespace lockstep
