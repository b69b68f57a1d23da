#include "metadata/store.h"

#include <gtest/gtest.h>

namespace kvfabric::metadata {
namespace {

TEST(MetadataStoreTest, StoreHostsAreTheHostsOfTheUri) {
  using Hosts = std::vector<std::string>;
  EXPECT_EQ(StoreHosts("etcd://10.0.0.1:2379"), Hosts{"10.0.0.1"});
  EXPECT_EQ(StoreHosts("etcd://a:2379,b:2379,[::1]:2379"), (Hosts{"a", "b", "::1"}));
  EXPECT_EQ(StoreHosts("http://meta:8080/metadata"), Hosts{"meta"});
  EXPECT_EQ(StoreHosts("http://127.0.0.1:8080"), Hosts{"127.0.0.1"});
  EXPECT_TRUE(StoreHosts("p2p").empty());
  EXPECT_TRUE(StoreHosts("P2PHANDSHAKE").empty());
}

}  // namespace
}  // namespace kvfabric::metadata
