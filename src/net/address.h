// Host and port text, and resolved socket addresses of either family: how
// segment names ("host:port", "[v6]:port") become addresses.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "kvfabric/status.h"

namespace kvfabric::net {

// "host:port" or "[v6addr]:port" (RFC 3986) -> parts. The host may be a
// name or an IP literal and comes back without brackets. An IPv6 literal
// without brackets is refused: its last colon could be the port's.
Status ParseHostPort(const std::string& s, std::string* host, uint16_t* port);
// The inverse: "[::1]:15000" for an IPv6 literal, "host:port" otherwise.
std::string FormatHostPort(const std::string& host, uint16_t port);

// One resolved address of either family, ready for bind or connect.
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;

  int family() const { return storage.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* get() { return reinterpret_cast<sockaddr*>(&storage); }
  std::string ip() const;  // numeric, without brackets: "10.0.0.2", "::1"
  uint16_t port() const;
  void set_port(uint16_t port);
  bool loopback() const;
};

// An IPv4 or IPv6 literal, or a name (getaddrinfo; IPv4 preferred when a
// name has both).
Status ResolveHost(const std::string& host, SocketAddress* out);
// Whether two "host:port" names reach the same endpoint: equal text, or the
// same port and hosts that resolve to the same address. False when either
// does not parse or resolve.
bool SameEndpoint(const std::string& a, const std::string& b);
// Whether `host` names this host's loopback by its text alone: "localhost",
// an IPv4 literal in 127.0.0.0/8, "::1" or such an IPv4 address mapped to
// IPv6 (brackets allowed). Any other
// name is taken to be reachable: nothing is resolved.
bool IsLoopbackName(const std::string& host);
// Resolves `host` to an IPv4 address string: for the fabric's own addressing,
// which is IPv4 only.
Status ResolveIPv4(const std::string& host, std::string* ip);

}  // namespace kvfabric::net
