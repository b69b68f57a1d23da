// Descriptors from a metadata store: one speaks only for
// the segment that was asked for, an older one never replaces a newer, and
// with a token each is authenticated and its memory keys are sealed.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvfabric/engine.h"
#include "metadata/descriptor_seal.h"
#include "tests/support/servers.h"
#include "tools/common/pattern.h"

namespace kvfabric::test {
namespace {

// Raw access to the http store's entries, as anyone who reaches it has.
class RawStore {
 public:
  explicit RawStore(const std::string& uri) {
    // "http://127.0.0.1:P/metadata"
    const std::string rest = uri.substr(7);
    const size_t slash = rest.find('/');
    client_ = std::make_unique<httplib::Client>("http://" + rest.substr(0, slash));
    path_ = rest.substr(slash);
  }
  std::string Get(const std::string& segment) {
    auto res = client_->Get(Target(segment));
    return res && res->status == 200 ? res->body : "";
  }
  bool Put(const std::string& segment, const std::string& value) {
    auto res = client_->Put(Target(segment), value, "application/json");
    return res && res->status == 200;
  }

 private:
  std::string Target(const std::string& segment) {
    return path_ + "?key=" + httplib::detail::encode_query_param(Settings().metadata_prefix + segment);
  }
  std::unique_ptr<httplib::Client> client_;
  std::string path_;
};

// Each test reads and writes the entries of the shared http metadata server.
class DescriptorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    uri = SharedMetadataUri("http", &why);
    if (uri.empty()) GTEST_SKIP() << why;
    store = std::make_unique<RawStore>(uri);
  }
  std::string uri;
  std::unique_ptr<RawStore> store;
};

std::unique_ptr<Engine> HttpEngine(const std::string& uri, const std::string& token) {
  EngineConfig cfg;
  cfg.protocol = "tcp";
  cfg.metadata = uri;
  cfg.apply_environment = false;
  cfg.settings.auth_token = token;
  std::unique_ptr<Engine> e;
  Status s = Engine::Create(cfg, &e);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return e;
}

// The entry of B replaced by C's (valid, sealed with the same token when
// there is one) is refused: taken, A's writes "to B" would land in C's memory.
TEST_F(DescriptorTest, AnEntryNamingAnotherSegmentIsRefused) {
  for (const std::string token : {"", "team-secret"}) {
    auto a = HttpEngine(uri, token), b = HttpEngine(uri, token), c = HttpEngine(uri, token);
    ASSERT_TRUE(a && b && c);
    std::vector<uint8_t> src(1 << 16), in_b(1 << 16), in_c(1 << 16, 0xcc);
    ASSERT_TRUE(a->RegisterMemory(src.data(), src.size()).ok());
    ASSERT_TRUE(b->RegisterMemory(in_b.data(), in_b.size()).ok());
    ASSERT_TRUE(c->RegisterMemory(in_c.data(), in_c.size()).ok());
    const std::string c_entry = store->Get(c->name());
    ASSERT_FALSE(c_entry.empty());
    ASSERT_TRUE(store->Put(b->name(), c_entry));
    SegmentHandle h;
    Status s = a->OpenSegment(b->name(), &h);
    EXPECT_EQ(s.code(), Status::Code::kPermissionDenied) << "token '" << token << "': " << s.ToString();
    EXPECT_NE(s.message().find("names segment " + c->name()), std::string::npos) << s.ToString();
    if (s.ok()) {  // accepted: show where the bytes go
      tools::FillPattern(src.data(), src.size(), 0, 7);
      (void)a->Transfer({{OpCode::kWrite, src.data(), h, reinterpret_cast<uint64_t>(in_c.data()), src.size()}});
    }
    EXPECT_EQ(in_c, std::vector<uint8_t>(1 << 16, 0xcc)) << "C's memory was written";
  }
}

// With a token, an entry changed by anyone without it is refused: a body
// edited, or a plain descriptor written in its place.
TEST_F(DescriptorTest, TamperedOrUnsealedEntriesAreRefusedWithAToken) {
  auto a = HttpEngine(uri, "team-secret"), b = HttpEngine(uri, "team-secret");
  ASSERT_TRUE(a && b);
  std::vector<uint8_t> buf(1 << 16);
  ASSERT_TRUE(b->RegisterMemory(buf.data(), buf.size()).ok());
  const std::string entry = store->Get(b->name());
  auto j = nlohmann::json::parse(entry);
  ASSERT_TRUE(j.contains("mac")) << entry;
  std::string body = j["body"];
  const size_t at = body.find("\"pid\":") + 6;
  body[at] = body[at] == '9' ? '8' : '9';  // one digit of the pid
  j["body"] = body;
  ASSERT_TRUE(store->Put(b->name(), j.dump()));
  SegmentHandle h;
  Status s = a->OpenSegment(b->name(), &h);
  EXPECT_EQ(s.code(), Status::Code::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("MAC does not match"), std::string::npos) << s.ToString();

  metadata::SegmentDesc plain;
  ASSERT_TRUE(metadata::OpenDescriptor(entry, "team-secret", &plain).ok());
  ASSERT_TRUE(store->Put(b->name(), metadata::SealDescriptor(plain, "")));
  s = a->OpenSegment(b->name(), &h);
  EXPECT_EQ(s.code(), Status::Code::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("not authenticated"), std::string::npos) << s.ToString();

  // The real entry again: served.
  ASSERT_TRUE(store->Put(b->name(), entry));
  EXPECT_TRUE(a->OpenSegment(b->name(), &h).ok());
}

// The keys a reader of the store sees are not the keys that open memory.
TEST_F(DescriptorTest, MemoryKeysInTheStoreAreSealed) {
  auto b = HttpEngine(uri, "team-secret");
  ASSERT_TRUE(b);
  std::vector<uint8_t> buf(1 << 16);
  ASSERT_TRUE(b->RegisterMemory(buf.data(), buf.size()).ok());
  const std::string entry = store->Get(b->name());
  metadata::SegmentDesc opened, as_stored;
  ASSERT_TRUE(metadata::OpenDescriptor(entry, "team-secret", &opened).ok());
  ASSERT_TRUE(metadata::FromJson(nlohmann::json::parse(entry)["body"].get<std::string>(), &as_stored).ok());
  ASSERT_EQ(opened.buffers.size(), 1u);
  const auto& real = opened.buffers[0].chunks[0].keys;
  const auto& seen = as_stored.buffers[0].chunks[0].keys;
  ASSERT_EQ(real.size(), seen.size());
  for (size_t r = 0; r < real.size(); ++r)
    if (real[r]) {
      EXPECT_NE(*real[r], *seen[r]) << "rail " << r << ": the key is readable in the store";
    }
}

// An older descriptor written back over a newer one (a replay) is refused:
// taken, it would send the engine back to an earlier state of the peer.
TEST_F(DescriptorTest, AStaleEntryIsRefused) {
  auto a = HttpEngine(uri, ""), b = HttpEngine(uri, "");
  ASSERT_TRUE(a && b);
  std::vector<uint8_t> src(1 << 16), first(1 << 16), second(1 << 16);
  ASSERT_TRUE(a->RegisterMemory(src.data(), src.size()).ok());
  ASSERT_TRUE(b->RegisterMemory(first.data(), first.size()).ok());
  SegmentHandle h;
  ASSERT_TRUE(a->OpenSegment(b->name(), &h).ok());
  const std::string old_entry = store->Get(b->name());
  ASSERT_TRUE(b->RegisterMemory(second.data(), second.size()).ok());
  // A learns of `second`: a transfer to it refetches the descriptor.
  ASSERT_TRUE(a->Transfer({{OpCode::kWrite, src.data(), h, reinterpret_cast<uint64_t>(second.data()), 4096}}).ok());
  ASSERT_TRUE(store->Put(b->name(), old_entry));
  // An address A does not know makes it refetch, and it finds the replay.
  std::vector<uint8_t> unknown(4096);
  Status s = a->Transfer({{OpCode::kWrite, src.data(), h, reinterpret_cast<uint64_t>(unknown.data()), 4096}});
  EXPECT_EQ(s.code(), Status::Code::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("stale descriptor"), std::string::npos) << s.ToString();
  // A still holds the newer descriptor: `second` is still reachable.
  EXPECT_TRUE(a->Transfer({{OpCode::kWrite, src.data(), h, reinterpret_cast<uint64_t>(second.data()), 4096}}).ok());
}

}  // namespace
}  // namespace kvfabric::test
