#include "fabric/shm_regions.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

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

}  // namespace
}  // namespace kvfabric::fabric
