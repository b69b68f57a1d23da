// The etcd and http metadata stores: segments leave with their engine, and an
// unreachable store fails Engine::Create quickly.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "kvfabric/engine.h"
#include "tests/support/servers.h"
#include "tests/support/targets.h"

namespace kvfabric::test {
namespace {

TEST(MetadataStoreTest, SegmentsLeaveTheStoreWithTheirEngine) {
  std::string why;
  const std::string uri = SharedMetadataUri("etcd", &why);
  if (uri.empty()) GTEST_SKIP() << why;
  EngineConfig cfg;
  cfg.protocol = "tcp";
  cfg.metadata = uri;
  cfg.apply_environment = false;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(cfg, &e).ok());

  // A clean shutdown removes the segment at once.
  std::string gone_name;
  {
    std::unique_ptr<Engine> b;
    ASSERT_TRUE(Engine::Create(cfg, &b).ok());
    gone_name = b->name();
    SegmentHandle h;
    ASSERT_TRUE(e->OpenSegment(gone_name, &h).ok());
    ASSERT_TRUE(e->CloseSegment(h).ok());
  }
  SegmentHandle h;
  EXPECT_EQ(e->OpenSegment(gone_name, &h).code(), Status::Code::kNotFound);

  // A killed process's segment goes when its lease expires (2 s here).
  std::string err;
  auto t = StartProcessTarget("tcp", 1 << 20, "KVF_METADATA_LEASE_S=2 metadata=" + uri, &err);
  ASSERT_NE(t, nullptr) << err;
  ASSERT_TRUE(e->OpenSegment(t->name, &h).ok());
  ASSERT_TRUE(e->CloseSegment(h).ok());
  const std::string name = t->name;
  ASSERT_TRUE(t->Kill());
  const auto start = std::chrono::steady_clock::now();
  Status s;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    s = e->OpenSegment(name, &h);
    if (s.code() == Status::Code::kNotFound) break;
    if (s.ok()) {
      ASSERT_TRUE(e->CloseSegment(h).ok());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(MetadataStoreTest, UnreachableStoreFailsCreateCleanly) {
  for (const char* uri : {"etcd://127.0.0.1:1", "http://127.0.0.1:1/metadata"}) {
    EngineConfig cfg;
    cfg.protocol = "tcp";
    cfg.metadata = uri;
    cfg.apply_environment = false;
    std::unique_ptr<Engine> e;
    const auto t0 = std::chrono::steady_clock::now();
    Status s = Engine::Create(cfg, &e);
    EXPECT_EQ(s.code(), Status::Code::kNetworkError) << uri << ": " << s.ToString();
    EXPECT_EQ(e, nullptr);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(6)) << uri;
  }
  EngineConfig cfg;
  cfg.metadata = "zookeeper://127.0.0.1:2181";
  std::unique_ptr<Engine> e;
  EXPECT_EQ(Engine::Create(cfg, &e).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace kvfabric::test
