#include "engine/startup.h"

#include <gtest/gtest.h>

namespace kvfabric::engine {
namespace {

TEST(StartupTest, ALoopbackHostIsRefusedWhereOtherHostsReadTheMetadata) {
  for (const char* host : {"127.0.0.1", "localhost", "::1", "127.0.1.1"})
    for (const char* metadata : {"etcd://10.0.0.1:2379", "http://10.0.0.1:8080/metadata",
                                 "etcd://127.0.0.1:2379,10.0.0.2:2379", "http://meta.example:8080/m"}) {
      const Status s = CheckAdvertisedHost(host, metadata);
      EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << host << " " << metadata;
      EXPECT_NE(s.message().find("local_server_name"), std::string::npos) << s.ToString();
      EXPECT_NE(s.message().find("--local_server_name HOST:0"), std::string::npos) << s.ToString();
    }
}

TEST(StartupTest, AHostOthersCanReachOrAMetadataStoreOfThisHostAlonePasses) {
  EXPECT_TRUE(CheckAdvertisedHost("10.0.0.3", "etcd://10.0.0.1:2379").ok());
  EXPECT_TRUE(CheckAdvertisedHost("node-3.cluster", "http://10.0.0.1:8080/metadata").ok());
  EXPECT_TRUE(CheckAdvertisedHost("127.0.0.1", "etcd://127.0.0.1:2379").ok());
  EXPECT_TRUE(CheckAdvertisedHost("127.0.0.1", "http://localhost:8080/metadata").ok());
  EXPECT_TRUE(CheckAdvertisedHost("127.0.0.1", "etcd://[::1]:2379").ok());
  EXPECT_TRUE(CheckAdvertisedHost("127.0.0.1", "p2p").ok()) << "p2p: a peer names the engine itself";
}

}  // namespace
}  // namespace kvfabric::engine
