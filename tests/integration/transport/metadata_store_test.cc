// The etcd and http metadata stores: segments leave with their engine, an
// unreachable or slow store fails its callers within the deadline, and the
// http store's writes are signed with the token.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvfabric/engine.h"
#include "tests/support/fake_http.h"
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

// A store that accepts writes at once but drips its answer to every read of
// a descriptor, one byte per 500 ms: no read times out, so only a deadline
// on the whole request keeps OpenSegment, and register() on another thread,
// from being held for as long as the store drips.
FakeHttpServer::Reply SlowReads(bool etcd, const std::string& method, const std::string& target) {
  if (!etcd) return {200, method == "GET" ? "{}" : "ok\n", method == "GET"};
  if (target == "/v3/kv/range") return {200, "{}", true};
  if (target == "/v3/lease/grant") return {200, R"({"ID":"7587","TTL":"10"})"};
  if (target == "/v3/lease/keepalive") return {200, R"({"result":{"ID":"7587","TTL":"10"}})"};
  return {200, "{}"};
}

class StoreDeadlineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StoreDeadlineTest, SlowStoreFailsOpenSegmentInTimeAndNeverHoldsRegister) {
  using namespace std::chrono;
  const bool etcd = GetParam() == "etcd";
  FakeHttpServer store([etcd](const std::string& m, const std::string& t) { return SlowReads(etcd, m, t); },
                       milliseconds(500));
  const std::string at = "127.0.0.1:" + std::to_string(store.port());
  EngineConfig cfg;
  cfg.protocol = "tcp";
  cfg.metadata = etcd ? "etcd://" + at : "http://" + at + "/metadata";
  cfg.apply_environment = false;
  cfg.settings.handshake_timeout_ms = 2000;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(cfg, &e).ok());

  Status opened;
  milliseconds open_took{0};
  std::atomic<bool> open_done{false};
  std::thread opener([&] {
    const auto t0 = steady_clock::now();
    SegmentHandle h;
    opened = e->OpenSegment("127.0.0.1:9", &h);
    open_took = duration_cast<milliseconds>(steady_clock::now() - t0);
    open_done = true;
  });
  const std::string read = etcd ? "POST /v3/kv/range" : "GET ";
  for (int i = 0; i < 500 && store.requests(read) == 0; ++i) std::this_thread::sleep_for(milliseconds(10));
  ASSERT_EQ(store.requests(read), 1);

  // register() publishes (a write the store answers at once) while the
  // read drips on the other thread.
  std::vector<char> buf(1 << 20);
  const auto t0 = steady_clock::now();
  Status registered = e->RegisterMemory(buf.data(), buf.size());
  const auto register_took = duration_cast<milliseconds>(steady_clock::now() - t0);
  const bool opener_was_waiting = !open_done;
  opener.join();

  EXPECT_TRUE(registered.ok()) << registered.ToString();
  EXPECT_LT(register_took.count(), 1000) << "register() waited for the other thread's slow read";
  EXPECT_TRUE(opener_was_waiting);
  EXPECT_EQ(opened.code(), Status::Code::kTimeout) << opened.ToString();
  EXPECT_NE(opened.message().find("KVF_HANDSHAKE_TIMEOUT_MS"), std::string::npos) << opened.ToString();
  EXPECT_GE(open_took.count(), 1900);
  EXPECT_LT(open_took.count(), 4000) << "the 2000 ms deadline did not bound the whole request";
  EXPECT_TRUE(e->UnregisterMemory(buf.data()).ok());
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreDeadlineTest, ::testing::Values("http", "etcd"),
                         [](const auto& info) { return info.param; });

// With a server started --require_auth, engines holding the token publish
// and remove their segment; engines without it, or with another, are refused
// at Engine::Create, and nothing of theirs is stored.
TEST(MetadataStoreTest, HttpStoreWritesAreSignedWithTheToken) {
  std::string why;
  auto server = StartHttpMetadataServer(&why, {"--require_auth"}, "s3cret");
  ASSERT_NE(server, nullptr) << why;
  httplib::Client reader("127.0.0.1", server->port);
  auto published = [&](const std::string& name) {
    auto r = reader.Get("/metadata?key=" + httplib::detail::encode_query_param("kvfabric/segments/" + name));
    return r && r->status == 200 && r->body.find(name) != std::string::npos;
  };

  EngineConfig cfg;
  cfg.protocol = "tcp";
  cfg.metadata = server->uri;
  cfg.apply_environment = false;
  cfg.settings.auth_token = "s3cret";
  std::unique_ptr<Engine> a, b;
  ASSERT_TRUE(Engine::Create(cfg, &a).ok());
  ASSERT_TRUE(Engine::Create(cfg, &b).ok());
  const std::string a_name = a->name();
  EXPECT_TRUE(published(a_name));
  SegmentHandle h;
  EXPECT_TRUE(b->OpenSegment(a_name, &h).ok());

  for (const char* token : {"", "other"}) {
    cfg.settings.auth_token = token;
    std::unique_ptr<Engine> c;
    Status s = Engine::Create(cfg, &c);
    EXPECT_EQ(s.code(), Status::Code::kPermissionDenied) << "token '" << token << "': " << s.ToString();
    EXPECT_NE(s.message().find("KVF_AUTH_TOKEN"), std::string::npos) << s.ToString();
  }

  a.reset();  // its signed DELETE is accepted
  EXPECT_FALSE(published(a_name));
  EXPECT_TRUE(published(b->name()));
}

}  // namespace
}  // namespace kvfabric::test
