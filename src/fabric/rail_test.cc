#include "fabric/rail.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fabric/fabric_info.h"

namespace kvfabric::fabric {
namespace {

// A region left in /dev/shm by a killed process whose pid this process now
// has must not stop the shm rail from opening (libfabric 1.17 fails
// fi_enable with EBUSY on it).
TEST(RailTest, ShmOpensOverAStaleRegionOfThisPid) {
  const std::string stale = "/dev/shm/" + std::to_string(getpid()) + ":0:0";
  { std::ofstream(stale) << "left behind by a killed process"; }
  ASSERT_TRUE(std::filesystem::exists(stale));
  InfoList infos;
  ASSERT_TRUE(InfoList::Query("shm", &infos).ok());
  std::unique_ptr<Rail> rail;
  Status s = Rail::Open(infos.entries().front(), RailOptions(), 0, &rail);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

}  // namespace
}  // namespace kvfabric::fabric
