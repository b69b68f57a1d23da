#include "metadata/handshake.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "metadata/store.h"
#include "net/address.h"
#include "net/socket.h"

namespace kvfabric::metadata {
namespace {

using Clock = std::chrono::steady_clock;

// A raw TCP connection to a server on loopback, as a hostile or broken
// client opens one; -1 (and a test failure) when it cannot connect.
int RawConnect(uint16_t port) {
  int fd = -1;
  EXPECT_TRUE(net::ConnectTcp("127.0.0.1", port, DeadlineIn(1000), &fd).ok());
  return fd;
}

// A handler that answers every request with an empty reply.
Status AnswerEmpty(uint16_t, const std::string&, std::string*) { return Status::OK(); }

class HandshakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HandshakeServer::Options o;
    o.timeout_ms = 500;
    o.max_frame = 4096;
    o.max_connections = 4;
    ASSERT_TRUE(HandshakeServer::Start(o, [this](uint16_t type, const std::string& p, std::string* r) {
      ++requests_;
      if (type == kNotify && p == "fail") return Status::NotFound("no such thing");
      *r = "reply:" + std::to_string(type) + ":" + p;
      return Status::OK();
    }, &server_).ok());
    addr_ = "127.0.0.1:" + std::to_string(server_->port());
  }
  int RawConnect() { return metadata::RawConnect(server_->port()); }
  std::unique_ptr<HandshakeServer> server_;
  std::string addr_;
  std::atomic<int> requests_{0};
};

// A listening socket nobody serves (the test plays the server); -1 on failure.
int ListenOnLoopback(uint16_t* port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  socklen_t len = sizeof(sa);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || listen(fd, 4) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(sa.sin_port);
  return fd;
}

TEST(HandshakeAuthTest, OnlyPeersWithTheSecretAreServed) {
  HandshakeServer::Options o;
  o.auth_token = "s3cret";
  int served = 0;
  std::unique_ptr<HandshakeServer> server;
  ASSERT_TRUE(HandshakeServer::Start(o, [&](uint16_t, const std::string&, std::string* r) {
    ++served;
    *r = "descriptor";
    return Status::OK();
  }, &server).ok());
  const std::string addr = "127.0.0.1:" + std::to_string(server->port());
  std::string r;
  Status s = HandshakeCall(addr, kGetSegment, "", {1000, 4096, ""}, &r);
  EXPECT_EQ(s.code(), Status::Code::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("KVF_AUTH_TOKEN"), std::string::npos) << s.ToString();
  s = HandshakeCall(addr, kGetSegment, "", {1000, 4096, "s3creT"}, &r);
  EXPECT_EQ(s.code(), Status::Code::kPermissionDenied) << s.ToString();
  s = HandshakeCall(addr, kGetSegment, "", {1000, 4096, "s3cret-and-more"}, &r);
  EXPECT_EQ(s.code(), Status::Code::kPermissionDenied) << s.ToString();
  EXPECT_EQ(served, 0);
  ASSERT_TRUE(HandshakeCall(addr, kGetSegment, "", {1000, 4096, "s3cret"}, &r).ok());
  EXPECT_EQ(r, "descriptor");
  EXPECT_EQ(served, 1);
}

// A client that holds a token wants the server to prove it holds the same:
// a server without one is refused, and told why.
// The token never crosses the wire: a fake server that records what an
// engine holding it sends learns nothing it could replay, and gets no request.
TEST(HandshakeAuthTest, TheTokenIsNeverSent) {
  uint16_t port = 0;
  const int lfd = ListenOnLoopback(&port);
  ASSERT_GE(lfd, 0);
  std::string captured;
  std::thread fake([&] {
    int c = accept(lfd, nullptr, nullptr);
    if (c < 0) return;
    Frame hello;
    if (ReadFrame(c, 4096, DeadlineIn(2000), &hello).ok()) {
      captured = hello.payload;
      // A challenge it cannot back with a proof.
      (void)WriteFrame(c, kChallenge, std::string(64, 'z'), DeadlineIn(1000));
      char buf[4096];
      ssize_t n;
      while ((n = recv(c, buf, sizeof(buf), 0)) > 0) captured.append(buf, static_cast<size_t>(n));
    }
    close(c);
  });
  const std::string token = "correct-horse-battery-staple";
  std::string r;
  Status s = HandshakeCall("127.0.0.1:" + std::to_string(port), kNotify, "the request", {2000, 4096, token}, &r);
  fake.join();
  close(lfd);
  EXPECT_EQ(s.code(), Status::Code::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("could not prove"), std::string::npos) << s.ToString();
  EXPECT_EQ(captured.size(), 32u) << "the client sent more than its nonce";
  EXPECT_EQ(captured.find(token), std::string::npos);
  EXPECT_EQ(captured.find("the request"), std::string::npos);
}

// Before authentication a server reads tiny frames only.
TEST(HandshakeAuthTest, FramesBeforeAuthenticationAreSmall) {
  HandshakeServer::Options o;
  o.auth_token = "s3cret";
  std::unique_ptr<HandshakeServer> server;
  ASSERT_TRUE(HandshakeServer::Start(o, AnswerEmpty, &server).ok());
  const int fd = RawConnect(server->port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(WriteFrame(fd, kHello, std::string(1000, 'n'), DeadlineIn(1000)).ok());
  Frame f;
  ASSERT_TRUE(ReadFrame(fd, 4096, DeadlineIn(1000), &f).ok());
  EXPECT_EQ(f.type, kError);
  EXPECT_NE(f.payload.find("exceeds the limit of 64"), std::string::npos) << f.payload;
  close(fd);
}

// A connection that does not authenticate in time is closed, whatever it
// trickles.
TEST(HandshakeAuthTest, UnauthenticatedConnectionsHaveAShortDeadline) {
  HandshakeServer::Options o;
  o.auth_token = "s3cret";
  o.timeout_ms = 5000;
  o.auth_timeout_ms = 300;
  std::unique_ptr<HandshakeServer> server;
  ASSERT_TRUE(HandshakeServer::Start(o, AnswerEmpty, &server).ok());
  const int fd = RawConnect(server->port());
  ASSERT_GE(fd, 0);
  const auto t0 = Clock::now();
  const char hdr[] = {'K', 'V', 'F', '1', 0, kHello, 0, 0, 0, 0, 0, 32};
  bool closed = false;
  for (size_t i = 0; i < sizeof(hdr) + 32 && !closed; ++i) {  // one byte per 100 ms
    closed = send(fd, i < sizeof(hdr) ? &hdr[i] : "n", 1, MSG_NOSIGNAL) != 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    char c;
    closed = closed || recv(fd, &c, 1, MSG_DONTWAIT) == 0;
  }
  EXPECT_TRUE(closed);
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(1500));
  close(fd);
}

// Many sockets without the token, reconnecting as fast as they can, do not
// keep a client that has it from being served.
TEST(HandshakeAuthTest, AFloodWithoutTheTokenDoesNotStarveClients) {
  HandshakeServer::Options o;
  o.auth_token = "s3cret";
  o.max_connections = 8;
  o.auth_timeout_ms = 500;
  std::unique_ptr<HandshakeServer> server;
  ASSERT_TRUE(HandshakeServer::Start(o, [](uint16_t, const std::string&, std::string* r) {
    *r = "ok";
    return Status::OK();
  }, &server).ok());
  std::atomic<bool> stop{false};
  std::vector<std::thread> flood;
  for (int i = 0; i < 16; ++i)
    flood.emplace_back([&] {
      while (!stop.load()) {
        int fd = -1;
        if (!net::ConnectTcp("127.0.0.1", server->port(), DeadlineIn(200), &fd).ok()) continue;
        char c;
        while (!stop.load() && recv(fd, &c, 1, 0) > 0) {  // hold the slot until displaced
        }
        close(fd);
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::string addr = "127.0.0.1:" + std::to_string(server->port());
  int ok = 0;
  for (int i = 0; i < 20; ++i) {
    std::string r;
    // The default timeout: on loopback under this churn a SYN can meet a
    // port in TIME_WAIT and wait for its retransmission (1 s, then 3 s).
    Status s = HandshakeCall(addr, kProbe, "", {5000, 4096, "s3cret"}, &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    ok += s.ok();
  }
  stop.store(true);
  for (auto& t : flood) t.join();
  EXPECT_EQ(ok, 20);
}

TEST_F(HandshakeTest, ASecretHolderRefusesAServerWithout) {
  std::string r;
  Status s = HandshakeCall(addr_, kProbe, "", {1000, 4096, "unneeded"}, &r);
  EXPECT_EQ(s.code(), Status::Code::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("has no KVF_AUTH_TOKEN"), std::string::npos) << s.ToString();
  EXPECT_EQ(requests_.load(), 0);
}

TEST_F(HandshakeTest, RequestsAndErrors) {
  std::string r;
  ASSERT_TRUE(HandshakeCall(addr_, kProbe, "", {}, &r).ok());
  EXPECT_EQ(r, "reply:3:");
  ASSERT_TRUE(HandshakeCall(addr_, kNotify, "hello", {}, &r).ok());
  EXPECT_EQ(r, "reply:2:hello");
  Status s = HandshakeCall(addr_, kNotify, "fail", {}, &r);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_NE(s.message().find("no such thing"), std::string::npos);
  EXPECT_EQ(HandshakeCall(addr_, 77, "", {}, &r).code(), Status::Code::kProtocolError);
}

TEST_F(HandshakeTest, ManyClientsAtOnce) {
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int i = 0; i < 32; ++i)
    ts.emplace_back([&, i] {
      std::string r;
      if (HandshakeCall(addr_, kNotify, std::to_string(i), {}, &r).ok() && r == "reply:2:" + std::to_string(i)) ++ok;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), 32);
}

TEST_F(HandshakeTest, OversizedFrameIsRefused) {
  std::string r;
  Status s = HandshakeCall(addr_, kNotify, std::string(8192, 'x'), {}, &r);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(requests_.load(), 0);
  ASSERT_TRUE(HandshakeCall(addr_, kProbe, "", {}, &r).ok());  // server still serves
}

TEST_F(HandshakeTest, GarbageIsRefusedAndTheServerSurvives) {
  int fd = RawConnect();
  const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(write(fd, junk, sizeof(junk)), 0);
  Frame f;
  Status s = ReadFrame(fd, 4096, DeadlineIn(2000), &f);
  if (s.ok()) {
    EXPECT_EQ(f.type, kError);
  }
  close(fd);
  std::string r;
  EXPECT_TRUE(HandshakeCall(addr_, kProbe, "", {}, &r).ok());
}

TEST_F(HandshakeTest, SlowClientIsDropped) {
  int fd = RawConnect();
  const char half[6] = {'K', 'V', 'F', '1', 0, 3};  // a header cut short, then silence
  ASSERT_EQ(write(fd, half, sizeof(half)), 6);
  auto t0 = Clock::now();
  char c;
  ssize_t n = read(fd, &c, 1);  // the server closes after its 500 ms timeout
  EXPECT_LE(n, 0);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
  close(fd);
}

// Sockets that connect and say nothing hold no slot a client needs: a
// newcomer displaces the oldest connection that has not proven itself.
TEST_F(HandshakeTest, SilentConnectionsCannotKeepClientsOut) {
  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) fds.push_back(RawConnect());  // twice the limit of 4
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::string r;
  const auto t0 = Clock::now();
  for (int i = 0; i < 4; ++i) {
    Status s = HandshakeCall(addr_, kProbe, "", {400, 4096, ""}, &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(1500));
  for (int fd : fds) close(fd);
}

// A frame's memory grows with the bytes that arrive: headers announcing
// 16 MiB each, with no payload behind them, cost almost nothing.
TEST(HandshakeLimitsTest, AnnouncedLengthsAllocateNothing) {
  HandshakeServer::Options o;
  o.max_frame = 16 << 20;
  o.max_connections = 64;
  o.auth_timeout_ms = 3000;
  std::unique_ptr<HandshakeServer> server;
  ASSERT_TRUE(HandshakeServer::Start(o, AnswerEmpty, &server).ok());
  auto resident_mib = [] {
    long pages = 0, resident = 0;
    FILE* f = fopen("/proc/self/statm", "r");
    if (f != nullptr && fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    if (f != nullptr) fclose(f);
    return resident * sysconf(_SC_PAGESIZE) / (1 << 20);
  };
  const long before = resident_mib();
  std::vector<int> fds;
  const unsigned char hdr[12] = {'K', 'V', 'F', '1', 0, kNotify, 0, 0, 0x01, 0, 0, 0};  // 16 MiB announced
  for (int i = 0; i < 48; ++i) {
    const int fd = RawConnect(server->port());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, hdr, sizeof(hdr)), 12);
    ASSERT_EQ(write(fd, "x", 1), 1);
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const long grown = resident_mib() - before;
  for (int fd : fds) close(fd);
  EXPECT_LT(grown, 64) << "48 headers announcing 16 MiB took " << grown << " MiB";
}

// Proven connections end at their lifetime and after their request budget,
// so clients that keep sending requests cannot hold every slot for ever.
TEST(HandshakeLimitsTest, ConnectionsEndAtTheirLifetimeAndBudget) {
  HandshakeServer::Options o;
  o.timeout_ms = 1000;
  o.max_connections = 2;
  o.lifetime_ms = 600;
  o.max_requests = 3;
  std::unique_ptr<HandshakeServer> server;
  ASSERT_TRUE(HandshakeServer::Start(o, [](uint16_t, const std::string&, std::string* r) {
    *r = "pong";
    return Status::OK();
  }, &server).ok());
  auto connect = [&] { return RawConnect(server->port()); };
  // The budget: the third reply comes, then the server closes.
  {
    int fd = connect();
    Frame f;
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(WriteFrame(fd, kProbe, "", DeadlineIn(1000)).ok());
      ASSERT_TRUE(ReadFrame(fd, 4096, DeadlineIn(1000), &f).ok());
      EXPECT_EQ(f.payload, "pong");
    }
    (void)WriteFrame(fd, kProbe, "", DeadlineIn(1000));
    EXPECT_FALSE(ReadFrame(fd, 4096, DeadlineIn(1000), &f).ok());
    close(fd);
  }
  // The lifetime: two connections probing every 100 ms hold both slots,
  // for their lifetime only.
  std::atomic<bool> stop{false};
  std::vector<std::thread> holders;
  for (int i = 0; i < 2; ++i)
    holders.emplace_back([&] {
      while (!stop.load()) {
        int fd = connect();
        Frame f;
        while (!stop.load() && WriteFrame(fd, kProbe, "", DeadlineIn(1000)).ok() &&
               ReadFrame(fd, 4096, DeadlineIn(1000), &f).ok())
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        close(fd);
        // reconnect at once: a holder that wants the slot back
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::string r;
  const auto t0 = Clock::now();
  Status s = HandshakeCall("127.0.0.1:" + std::to_string(server->port()), kProbe, "", {3000, 4096, ""}, &r);
  const auto waited = Clock::now() - t0;
  stop.store(true);
  for (auto& t : holders) t.join();
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_LT(waited, std::chrono::milliseconds(2500));
}

TEST(HandshakeClientTest, UnreachableAndSilentServers) {
  std::string r;
  auto t0 = Clock::now();
  Status s = HandshakeCall("127.0.0.1:1", kProbe, "", {500, 4096, ""}, &r);
  EXPECT_EQ(s.code(), Status::Code::kNetworkError) << s.ToString();
  // A server that accepts but never answers: a Timeout within the budget.
  uint16_t port = 0;
  const int lfd = ListenOnLoopback(&port);
  ASSERT_GE(lfd, 0);
  t0 = Clock::now();
  s = HandshakeCall("127.0.0.1:" + std::to_string(port), kGetSegment, "", {300, 4096, ""}, &r);
  EXPECT_EQ(s.code(), Status::Code::kTimeout) << s.ToString();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
  close(lfd);
  EXPECT_EQ(HandshakeCall("nonsense", kProbe, "", {}, &r).code(), Status::Code::kInvalidArgument);
}

TEST(HandshakeClientTest, GarbageAnswerIsAProtocolError) {
  uint16_t port = 0;
  const int lfd = ListenOnLoopback(&port);
  ASSERT_GE(lfd, 0);
  std::thread liar([lfd] {
    int c = accept(lfd, nullptr, nullptr);
    const char junk[] = "HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n{\"not\": \"a frame\"}";
    if (c >= 0) {
      ssize_t w = write(c, junk, sizeof(junk));
      (void)w;
      close(c);
    }
  });
  std::string r;
  const auto t0 = Clock::now();
  Status s = HandshakeCall("127.0.0.1:" + std::to_string(port), kGetSegment, "", {1000, 4096, ""}, &r);
  liar.join();
  close(lfd);
  EXPECT_EQ(s.code(), Status::Code::kProtocolError) << s.ToString();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
}

// Whether this host can bind the IPv6 loopback (containers often cannot).
bool HaveIPv6Loopback() {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  sa.sin6_addr = in6addr_loopback;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  close(fd);
  return ok;
}

TEST(HandshakeIPv6Test, ServerOnV6LoopbackAnswersBracketedNames) {
  if (!HaveIPv6Loopback()) GTEST_SKIP() << "this host cannot bind the IPv6 loopback ::1 (IPv6 disabled?)";
  static const char kRaw[] = "{\"segment\":\0\xff}";  // embedded NUL and a high byte
  const std::string desc(kRaw, sizeof(kRaw) - 1);
  HandshakeServer::Options o;
  o.host = "::1";
  o.timeout_ms = 1000;
  std::unique_ptr<HandshakeServer> server;
  ASSERT_TRUE(HandshakeServer::Start(o, [&desc](uint16_t type, const std::string& p, std::string* r) {
    if (type == kProbe) *r = "[::1]:probe";
    else if (type == kGetSegment) *r = desc;
    else *r = "notify:" + p;
    return Status::OK();
  }, &server).ok());
  ASSERT_NE(server->port(), 0);
  const std::string addr = net::FormatHostPort("::1", server->port());
  EXPECT_EQ(addr, "[::1]:" + std::to_string(server->port()));
  std::string r;
  ASSERT_TRUE(HandshakeCall(addr, kProbe, "", {1000, 4096, ""}, &r).ok());
  EXPECT_EQ(r, "[::1]:probe");
  ASSERT_TRUE(HandshakeCall(addr, kGetSegment, "", {1000, 4096, ""}, &r).ok());
  EXPECT_EQ(r, desc);
  ASSERT_TRUE(HandshakeCall(addr, kNotify, std::string("a\0b", 3), {1000, 4096, ""}, &r).ok());
  EXPECT_EQ(r, std::string("notify:a\0b", 10));
  // Bound to ::1 exactly: not reachable over IPv4, and the bare form is refused.
  EXPECT_EQ(HandshakeCall("127.0.0.1:" + std::to_string(server->port()), kProbe, "", {500, 4096, ""}, &r).code(),
            Status::Code::kNetworkError);
  Status s = HandshakeCall("::1:" + std::to_string(server->port()), kProbe, "", {500, 4096, ""}, &r);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("[addr]:port"), std::string::npos) << s.ToString();
}

TEST(HandshakeIPv6Test, ConnectErrorsNameTheBracketedAddress) {
  if (!HaveIPv6Loopback()) GTEST_SKIP() << "this host cannot bind the IPv6 loopback ::1 (IPv6 disabled?)";
  std::string r;
  Status s = HandshakeCall("[::1]:1", kProbe, "", {500, 4096, ""}, &r);
  EXPECT_EQ(s.code(), Status::Code::kNetworkError) << s.ToString();
  EXPECT_NE(s.message().find("[::1]:1"), std::string::npos) << s.ToString();
  // Binding an address this host does not have fails and says where.
  HandshakeServer::Options o;
  o.host = "2001:db8::1";
  std::unique_ptr<HandshakeServer> server;
  s = HandshakeServer::Start(o, AnswerEmpty, &server);
  EXPECT_EQ(s.code(), Status::Code::kNetworkError) << s.ToString();
  EXPECT_NE(s.message().find("[2001:db8::1]:0"), std::string::npos) << s.ToString();
}

TEST(StoreUriTest, IPv6EndpointsNeedBrackets) {
  Settings settings;
  settings.handshake_timeout_ms = 300;
  std::unique_ptr<MetadataStore> store;
  for (const char* uri : {"etcd://::1:2379", "etcd://127.0.0.1:2379,::1:2379", "http://::1:8080/metadata",
                          "http://fe80::1/metadata"}) {
    Status s = OpenMetadataStore(uri, settings, &store);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << uri;
    EXPECT_NE(s.message().find("[addr]:port"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(uri), std::string::npos) << s.ToString();
  }
  // Bracketed, they parse; nothing listens on port 1, and the errors say where.
  Status s = OpenMetadataStore("etcd://[::1]:1", settings, &store);
  EXPECT_EQ(s.code(), Status::Code::kNetworkError) << s.ToString();
  EXPECT_NE(s.message().find("[::1]:1"), std::string::npos) << s.ToString();
  ASSERT_TRUE(OpenMetadataStore("http://[::1]:1/metadata", settings, &store).ok());
  std::string d;
  s = store->Fetch("x", &d);
  EXPECT_EQ(s.code(), Status::Code::kNetworkError) << s.ToString();
  EXPECT_NE(s.message().find("http://[::1]:1/metadata"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace kvfabric::metadata
