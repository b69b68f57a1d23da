#include "store/node/pool_memory.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace kvfabric::store {
namespace {

TEST(PoolMemoryTest, APoolFitsInWhatIsAvailableOrIsRefusedSayingSo) {
  EXPECT_TRUE(CheckPoolFits(1 << 30, 2ull << 30).ok());
  EXPECT_TRUE(CheckPoolFits(1 << 30, 1 << 30).ok());
  EXPECT_TRUE(CheckPoolFits(1ull << 40, 0).ok()) << "nothing known: nothing refused";
  const Status s = CheckPoolFits(3ull << 30, 2ull << 30);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  for (const char* part : {"3221225472", "2147483648", "KVF_STORE_POOL_BYTES"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " not in: " << s.message();
}

TEST(PoolMemoryTest, WhatIsAvailableIsReadAndAtMostTheHostsMemory) {
  const uint64_t total = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t available = AvailableMemory();
  EXPECT_GT(available, 0u);
  EXPECT_LE(available, total);
}

}  // namespace
}  // namespace kvfabric::store
