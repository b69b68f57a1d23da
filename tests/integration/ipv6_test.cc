// IPv6 for the handshake and the metadata stores: engines named [::1]:port
// open each other by that name and move bytes (the fabric's data path itself
// stays IPv4, on loopback), with p2p, with kvfabric-metadata-server on ::1
// and with etcd on [::1]. Every test skips where ::1 cannot be bound.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kvfabric/engine.h"
#include "tests/support/process.h"
#include "tests/support/servers.h"
#include "tools/common/pattern.h"

#ifndef KVF_METADATA_SERVER_PATH
#error "KVF_METADATA_SERVER_PATH must name the kvfabric-metadata-server binary"
#endif

namespace kvfabric {
namespace {

using test::Child;
using test::FreePort;
using test::WaitHttpReady;
using tools::CheckPattern;
using tools::FillPattern;

constexpr size_t MiB = 1024 * 1024;
constexpr size_t kBufferSize = 4 * MiB;
constexpr const char* kNoIPv6 = "this host cannot bind the IPv6 loopback ::1 (IPv6 disabled?)";

struct TempDir {
  ~TempDir() {
    if (!path.empty()) std::filesystem::remove_all(path);
  }
  std::string path;
};

class IPv6Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (FreePort("::1") == 0) GTEST_SKIP() << kNoIPv6;
  }
  void TearDown() override {
    initiator_.reset();
    target_.reset();
    std::free(local_);
    std::free(remote_);
  }

  static EngineConfig Config(const std::string& metadata) {
    EngineConfig c;
    c.local_server_name = "[::1]:0";
    c.protocol = "tcp";
    c.metadata = metadata;
    c.apply_environment = false;
    c.settings.log_level = "warn";
    c.settings.transfer_timeout_ms = 20000;
    return c;
  }

  // A target engine with a registered buffer of pattern 7, and an initiator
  // that opens it by its [::1]:port name. The two may reach the same store
  // by different addresses.
  void StartPair(const std::string& metadata, std::string initiator_metadata = "") {
    if (initiator_metadata.empty()) initiator_metadata = metadata;
    Status s = Engine::Create(Config(metadata), &target_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    const std::string& name = target_->name();
    const std::string prefix = "[::1]:";
    ASSERT_EQ(name.rfind(prefix, 0), 0u) << name;
    const std::string port = name.substr(prefix.size());
    ASSERT_FALSE(port.empty()) << name;
    ASSERT_EQ(port.find_first_not_of("0123456789"), std::string::npos) << name;
    ASSERT_GT(std::atoi(port.c_str()), 0) << name;
    ASSERT_EQ(posix_memalign(&remote_, 4096, kBufferSize), 0);
    FillPattern(remote_, kBufferSize, 0, 7);
    s = target_->RegisterMemory(remote_, kBufferSize);
    ASSERT_TRUE(s.ok()) << s.ToString();

    s = Engine::Create(Config(initiator_metadata), &initiator_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(posix_memalign(&local_, 4096, kBufferSize), 0);
    s = initiator_->RegisterMemory(local_, kBufferSize);
    ASSERT_TRUE(s.ok()) << s.ToString();
    s = initiator_->OpenSegment(name, &seg_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // Starts kvfabric-metadata-server bound to `host` and reads the port from
  // the line it prints, which must name the store "http://<shown>:P/metadata".
  static void StartMetadataServer(Child* server, const std::string& host, const std::string& shown, int* port) {
    ASSERT_TRUE(server->Start({KVF_METADATA_SERVER_PATH, "--host", host, "--port", "0"}));
    const std::string line = server->FirstLine(20000);
    const std::string tag = "metadata http://" + shown + ":";
    const size_t at = line.find(tag);
    ASSERT_NE(at, std::string::npos) << "kvfabric-metadata-server --host " << host << " said: " << line;
    *port = std::atoi(line.c_str() + at + tag.size());
    ASSERT_GT(*port, 0) << line;
    ASSERT_EQ(line.substr(at + 9), "http://" + shown + ":" + std::to_string(*port) + "/metadata");
  }

  uint8_t* local(size_t off) { return static_cast<uint8_t*>(local_) + off; }
  uint8_t* remote(size_t off) { return static_cast<uint8_t*>(remote_) + off; }
  uint64_t remote_addr(size_t off) { return reinterpret_cast<uintptr_t>(remote_) + off; }

  // WRITE then READ, each checked byte for byte in the memory it landed in,
  // with the bytes around it untouched.
  void MoveBytesBothWays() {
    const size_t woff = MiB + 3, wlen = MiB + 123;
    FillPattern(local(0), wlen, woff, 21);
    Status s = initiator_->Transfer({{OpCode::kWrite, local(0), seg_, remote_addr(woff), wlen}});
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(CheckPattern(remote(woff), wlen, woff, 21), wlen);
    EXPECT_EQ(CheckPattern(remote(0), woff, 0, 7), woff);
    const size_t wend = woff + wlen;
    EXPECT_EQ(CheckPattern(remote(wend), kBufferSize - wend, wend, 7), kBufferSize - wend);

    const size_t roff = 3 * MiB - 5, rlen = 777777, loff = 4096 + 1;
    FillPattern(remote(roff), rlen, roff, 22);
    std::memset(local_, 0, kBufferSize);
    s = initiator_->Transfer({{OpCode::kRead, local(loff), seg_, remote_addr(roff), rlen}});
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(CheckPattern(local(loff), rlen, roff, 22), rlen);
    const std::vector<uint8_t> zeros(kBufferSize, 0);
    EXPECT_EQ(std::memcmp(local(0), zeros.data(), loff), 0);
    EXPECT_EQ(std::memcmp(local(loff + rlen), zeros.data(), kBufferSize - loff - rlen), 0);
  }

  std::unique_ptr<Engine> target_, initiator_;
  void* local_ = nullptr;
  void* remote_ = nullptr;
  SegmentHandle seg_ = -1;
};

TEST_F(IPv6Test, P2pEnginesNamedByBracketedAddress) {
  ASSERT_NO_FATAL_FAILURE(StartPair("p2p"));
  // The data path stays IPv4: an engine on ::1 uses the loopback rail.
  auto rails = target_->rails();
  ASSERT_EQ(rails.size(), 1u);
  EXPECT_EQ(rails.front().provider, "tcp;ofi_rxm");
  EXPECT_EQ(rails.front().domain, "lo");
  ASSERT_NO_FATAL_FAILURE(MoveBytesBothWays());

  std::vector<RemoteBuffer> bufs;
  ASSERT_TRUE(initiator_->GetSegmentBuffers(seg_, &bufs).ok());
  ASSERT_EQ(bufs.size(), 1u);
  EXPECT_EQ(bufs[0].addr, remote_addr(0));
  EXPECT_EQ(bufs[0].length, kBufferSize);
  ASSERT_TRUE(initiator_->Probe(target_->name()).ok());
  Status s = initiator_->SendNotify(target_->name(), std::string("over [::1]\0!", 12));
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<std::string> got;
  ASSERT_TRUE(target_->GetNotifies(&got).ok());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], std::string("over [::1]\0!", 12));
  // Opening its own name is the engine's own segment.
  SegmentHandle self = -1, again = -1;
  ASSERT_TRUE(initiator_->OpenSegment(initiator_->name(), &self).ok());
  ASSERT_TRUE(initiator_->OpenSegment(target_->name(), &again).ok());
  EXPECT_EQ(again, seg_);
  EXPECT_NE(self, seg_);
}

TEST_F(IPv6Test, BareIPv6NameIsRefusedWithTheFix) {
  EngineConfig c = Config("p2p");
  c.local_server_name = "::1";
  std::unique_ptr<Engine> e;
  Status s = Engine::Create(c, &e);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("local_server_name"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("[addr]:port"), std::string::npos) << s.ToString();
  std::unique_ptr<Engine> probe;
  ASSERT_TRUE(Engine::Create(Config("p2p"), &probe).ok());
  s = probe->Probe("::1:1");
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
}

TEST_F(IPv6Test, HttpMetadataStoreOnIPv6Loopback) {
  Child server;
  int port = 0;
  ASSERT_NO_FATAL_FAILURE(StartMetadataServer(&server, "::1", "[::1]", &port));
  ASSERT_NO_FATAL_FAILURE(StartPair("http://[::1]:" + std::to_string(port) + "/metadata"));
  ASSERT_NO_FATAL_FAILURE(MoveBytesBothWays());
  // The descriptor is in the store, under the bracketed name, until the engine closes.
  const std::string name = target_->name();
  const std::string key = "/metadata?key=" + httplib::detail::encode_query_param(Settings{}.metadata_prefix + name);
  httplib::Client c("::1", port);
  auto r = c.Get(key);
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("\"name\":\"" + name + "\""), std::string::npos) << r->body.substr(0, 200);
  initiator_.reset();
  target_.reset();
  r = c.Get(key);
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 404);
}

// Any IPv6 literal, not only digits and colons: httplib's own URL parsing
// refuses [::ffff:127.0.0.1], which reaches a server on 127.0.0.1.
TEST_F(IPv6Test, HttpMetadataStoreAtAMappedAddress) {
  Child server;
  int port = 0;
  ASSERT_NO_FATAL_FAILURE(StartMetadataServer(&server, "127.0.0.1", "127.0.0.1", &port));
  ASSERT_NO_FATAL_FAILURE(StartPair("http://[::ffff:127.0.0.1]:" + std::to_string(port) + "/metadata"));
  ASSERT_NO_FATAL_FAILURE(MoveBytesBothWays());
  initiator_.reset();
  target_.reset();  // removes their keys while the server still runs
}

TEST_F(IPv6Test, EtcdMetadataStoreOnIPv6Loopback) {
  if (system("command -v etcd >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "no etcd binary on PATH (Debian: apt install etcd-server)";
  char tmpl[] = "/tmp/kvf-etcd6-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  TempDir dir{tmpl};  // outlives etcd
  const int client = FreePort("::1"), peer = FreePort("::1"), v4client = FreePort("::1");
  ASSERT_TRUE(client > 0 && peer > 0 && v4client > 0 && client != peer && v4client != client && v4client != peer);
  const std::string c = "http://[::1]:" + std::to_string(client), p = "http://[::1]:" + std::to_string(peer);
  const std::string c4 = "http://127.0.0.1:" + std::to_string(v4client);
  Child etcd;
  ASSERT_TRUE(etcd.Start({"etcd", "--name", "kvf-v6", "--data-dir", dir.path, "--listen-client-urls", c + "," + c4,
                          "--advertise-client-urls", c, "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
                          "--initial-cluster", "kvf-v6=" + p}));
  ASSERT_TRUE(WaitHttpReady("::1", client, "POST", "/v3/maintenance/status", etcd.pid())) << "etcd did not start on " << c;
  // The initiator reaches the same etcd at a mapped address (hex digits in brackets).
  ASSERT_NO_FATAL_FAILURE(StartPair("etcd://[::1]:" + std::to_string(client),
                                    "etcd://[::ffff:127.0.0.1]:" + std::to_string(v4client)));
  ASSERT_NO_FATAL_FAILURE(MoveBytesBothWays());
  initiator_.reset();
  target_.reset();  // revokes its lease while etcd still runs
}

}  // namespace
}  // namespace kvfabric
