#include "fabric/shm_regions.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

namespace kvfabric::fabric {
namespace {

namespace fs = std::filesystem;

TEST(ShmRegionsTest, RemovesOnlyTheRegionsOfThePid) {
  const fs::path dir = fs::path(testing::TempDir()) / ("shm_regions_test." + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* name : {"1234:0:0", "1234:shm:1", "12345:0:0", "x1234:0", "4321:1234:0"})
    std::ofstream(dir / name) << "region";
  EXPECT_EQ(RemoveShmRegionsOfPid(dir.string(), 1234), 2u);
  EXPECT_FALSE(fs::exists(dir / "1234:0:0"));
  EXPECT_FALSE(fs::exists(dir / "1234:shm:1"));
  EXPECT_TRUE(fs::exists(dir / "12345:0:0"));  // another pid that starts alike
  EXPECT_TRUE(fs::exists(dir / "x1234:0"));
  EXPECT_TRUE(fs::exists(dir / "4321:1234:0"));
  EXPECT_EQ(RemoveShmRegionsOfPid((dir / "missing").string(), 1234), 0u);
  fs::remove_all(dir);
}

TEST(ShmRegionsTest, EndpointNamesAreThisProcessesAndNeverRepeat) {
  const std::string prefix = std::string(kShmNamePrefix) + std::to_string(getpid()) + "-";
  std::set<std::string> names;
  for (int i = 0; i < 100; ++i) {
    const std::string name = ShmEndpointName();
    EXPECT_EQ(name.rfind(prefix, 0), 0u) << name;
    EXPECT_EQ(name.find('/'), std::string::npos) << name;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), 100u);
}

// A pid that no process has now: a child that has exited and been reaped.
pid_t DeadPid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

TEST(ShmRegionsTest, RemovesOnlyUnheldRegionsOfExitedProcessesNamedByKvfabric) {
  const fs::path dir = fs::path(testing::TempDir()) / ("shm_sweep_test." + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string dead = std::to_string(DeadPid());
  const std::string abandoned = "kvf-" + dead + "-0-00000000000000aa";
  const std::string held = "kvf-" + dead + "-1-00000000000000aa";  // its process is out of sight, its lock is not
  const std::string alive = "kvf-" + std::to_string(getppid()) + "-0-00000000000000bb";
  const std::string mine = "kvf-" + std::to_string(getpid()) + "-0-00000000000000cc";
  const std::string providers = dead + ":0:0";  // named the provider's way: never ours to judge
  for (const std::string& name : {abandoned, held, alive, mine, providers, std::string("kvf-x-0-1")})
    std::ofstream(dir / name) << std::string(4096, 'r');
  fs::create_symlink(dir / alive, dir / ("kvf-" + dead + "-2-00000000000000dd"));
  ShmRegionHold hold;
  std::string why;
  ASSERT_TRUE(hold.Take(dir.string(), held, &why)) << why;

  // Too young: a region just created, its process about to lock it.
  ShmSweep none = RemoveAbandonedShmRegions(dir.string(), std::chrono::hours(1));
  EXPECT_EQ(none.removed, 0u);
  EXPECT_TRUE(fs::exists(dir / abandoned));

  const ShmSweep sweep = RemoveAbandonedShmRegions(dir.string(), std::chrono::seconds(0));
  EXPECT_EQ(sweep.removed, 1u);
  EXPECT_EQ(sweep.bytes, 4096u);
  EXPECT_FALSE(fs::exists(dir / abandoned));
  for (const std::string& name : {held, alive, mine, providers, std::string("kvf-x-0-1")})
    EXPECT_TRUE(fs::exists(dir / name)) << name;
  EXPECT_TRUE(fs::is_symlink(dir / ("kvf-" + dead + "-2-00000000000000dd")));

  // The hold let go (its process ended): the region goes with the next sweep.
  hold = ShmRegionHold();
  EXPECT_EQ(RemoveAbandonedShmRegions(dir.string(), std::chrono::seconds(0)).removed, 1u);
  EXPECT_FALSE(fs::exists(dir / held));
  EXPECT_EQ(RemoveAbandonedShmRegions((dir / "missing").string(), std::chrono::seconds(0)).removed, 0u);
  fs::remove_all(dir);
}

TEST(ShmRegionsTest, AHoldOnAMissingFileSaysWhy) {
  ShmRegionHold hold;
  std::string why;
  EXPECT_FALSE(hold.Take(testing::TempDir(), "kvf-no-such-region", &why));
  EXPECT_FALSE(hold.held());
  EXPECT_NE(why.find("kvf-no-such-region"), std::string::npos) << why;
}

}  // namespace
}  // namespace kvfabric::fabric
