#include "fabric/rail.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

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

// Where the application chooses memory keys (tcp: no FI_MR_PROV_KEY), they
// are random over the provider's key size, not 1, 2, 3... that a client
// scanning the rail's port could guess.
TEST(RailTest, ApplicationChosenKeysAreUnguessable) {
  InfoList infos;
  ASSERT_TRUE(InfoList::Query("tcp;ofi_rxm", &infos).ok());
  const fi_info* info = infos.entries().front();
  ASSERT_EQ(info->domain_attr->mr_mode & FI_MR_PROV_KEY, 0u) << "tcp;ofi_rxm lets the application choose keys";
  std::unique_ptr<Rail> rail;
  ASSERT_TRUE(Rail::Open(info, RailOptions(), 0, &rail).ok());
  std::vector<char> buf(1 << 16);
  std::vector<std::unique_ptr<MemoryRegion>> mrs(16);
  std::set<uint64_t> keys;
  for (size_t i = 0; i < mrs.size(); ++i) {
    ASSERT_TRUE(rail->RegisterMemory(buf.data() + i * 4096, 4096, &mrs[i]).ok());
    keys.insert(mrs[i]->key());
  }
  EXPECT_EQ(keys.size(), mrs.size());
  // 16 keys drawn from 64 bits: all of them above 2^32 but with odds 2^-28.
  size_t small = 0;
  for (uint64_t k : keys) small += k < (1ull << 32);
  EXPECT_LT(small, 4u) << "keys look sequential, first " << *keys.begin();
}

}  // namespace
}  // namespace kvfabric::fabric
