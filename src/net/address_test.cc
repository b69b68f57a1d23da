#include "net/address.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace kvfabric::net {
namespace {

TEST(AddressTest, ParseHostPort) {
  std::string h;
  uint16_t p;
  ASSERT_TRUE(ParseHostPort("a.b:80", &h, &p).ok());
  EXPECT_EQ(h, "a.b");
  EXPECT_EQ(p, 80);
  EXPECT_FALSE(ParseHostPort(":80", &h, &p).ok());
  EXPECT_FALSE(ParseHostPort("a:", &h, &p).ok());
  EXPECT_FALSE(ParseHostPort("a:99999", &h, &p).ok());
  EXPECT_FALSE(ParseHostPort("a:8x", &h, &p).ok());
}

TEST(AddressTest, ParseHostPortIPv6) {
  std::string h;
  uint16_t p = 1;
  ASSERT_TRUE(ParseHostPort("[::1]:15000", &h, &p).ok());
  EXPECT_EQ(h, "::1");
  EXPECT_EQ(p, 15000);
  ASSERT_TRUE(ParseHostPort("[fe80::1:abcd]:0", &h, &p).ok());
  EXPECT_EQ(h, "fe80::1:abcd");
  EXPECT_EQ(p, 0);
  ASSERT_TRUE(ParseHostPort("[2001:db8::a]:65535", &h, &p).ok());
  EXPECT_EQ(h, "2001:db8::a");
  EXPECT_EQ(p, 65535);
  // A bare IPv6 literal, with or without something that might be a port.
  for (const char* bare : {"::1", "fe80::1", "::1:80", "2001:db8::a:15000"}) {
    Status s = ParseHostPort(bare, &h, &p);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bare;
    EXPECT_NE(s.message().find("[addr]:port"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(bare), std::string::npos) << s.ToString();
  }
  for (const char* bad : {"[::1]", "[::1]:", "[::1]80", "[::1:80", "[]:80", "[host]:80", "a[b]:80", "::1]:80",
                          "[::1]:99999", "[::1]:-1", "a:+80", "a: 80", "a:-0"})
    EXPECT_EQ(ParseHostPort(bad, &h, &p).code(), Status::Code::kInvalidArgument) << bad;
}

TEST(AddressTest, LoopbackNamesAreKnownByTheirText) {
  for (const char* h : {"localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]", "::ffff:127.0.0.1"}) EXPECT_TRUE(IsLoopbackName(h)) << h;
  for (const char* h : {"10.0.0.1", "0.0.0.0", "::", "fe80::1", "::ffff:10.0.0.1", "node-1", "128.0.0.1", ""})
    EXPECT_FALSE(IsLoopbackName(h)) << h;
}

TEST(AddressTest, FormatHostPortRoundTrips) {
  EXPECT_EQ(FormatHostPort("::1", 15000), "[::1]:15000");
  EXPECT_EQ(FormatHostPort("fe80::1", 0), "[fe80::1]:0");
  EXPECT_EQ(FormatHostPort("10.0.0.2", 80), "10.0.0.2:80");
  EXPECT_EQ(FormatHostPort("host.example", 65535), "host.example:65535");
  for (const std::string host : {"::1", "2001:db8::a", "127.0.0.1", "localhost"}) {
    std::string h;
    uint16_t p = 0;
    ASSERT_TRUE(ParseHostPort(FormatHostPort(host, 4242), &h, &p).ok()) << host;
    EXPECT_EQ(h, host);
    EXPECT_EQ(p, 4242);
  }
}

TEST(AddressTest, ResolveHostBothFamilies) {
  SocketAddress a;
  ASSERT_TRUE(ResolveHost("127.0.0.1", &a).ok());
  EXPECT_EQ(a.family(), AF_INET);
  EXPECT_EQ(a.ip(), "127.0.0.1");
  EXPECT_TRUE(a.loopback());
  a.set_port(15000);
  EXPECT_EQ(a.port(), 15000);
  ASSERT_TRUE(ResolveHost("::1", &a).ok());
  EXPECT_EQ(a.family(), AF_INET6);
  EXPECT_EQ(a.length, sizeof(sockaddr_in6));
  EXPECT_EQ(a.ip(), "::1");
  EXPECT_TRUE(a.loopback());
  a.set_port(15001);
  EXPECT_EQ(a.port(), 15001);
  ASSERT_TRUE(ResolveHost("2001:db8::a", &a).ok());
  EXPECT_EQ(a.family(), AF_INET6);
  EXPECT_EQ(a.ip(), "2001:db8::a");
  EXPECT_FALSE(a.loopback());
  ASSERT_TRUE(ResolveHost("10.1.2.3", &a).ok());
  EXPECT_FALSE(a.loopback());
  // A name that has an IPv4 address resolves to it, even when it has an IPv6 one.
  std::string v4;
  ASSERT_TRUE(ResolveHost("localhost", &a).ok());
  EXPECT_TRUE(a.loopback()) << a.ip();
  if (ResolveIPv4("localhost", &v4).ok()) {
    EXPECT_EQ(a.family(), AF_INET);
    EXPECT_EQ(a.ip(), v4);
  }
}

TEST(AddressTest, ResolveErrorsNameTheHost) {
  SocketAddress a;
  Status s = ResolveHost("fe80::zz", &a);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("'fe80::zz'"), std::string::npos) << s.ToString();
  s = ResolveHost("no-such-host.invalid", &a);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_NE(s.message().find("'no-such-host.invalid'"), std::string::npos) << s.ToString();
  EXPECT_FALSE(ResolveHost("", &a).ok());
  std::string ip;
  s = ResolveIPv4("::1", &ip);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("IPv6"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace kvfabric::net
