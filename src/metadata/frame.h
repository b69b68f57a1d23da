// Handshake wire format: a 12-byte header (magic "KVF1", type, reserved,
// payload length, all big-endian) and a payload. Every read and write has a
// deadline and the payload size is bounded, so a slow or hostile peer costs
// at most one timeout.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "kvfabric/status.h"

namespace kvfabric::metadata {

using Deadline = std::chrono::steady_clock::time_point;
inline Deadline DeadlineIn(int64_t ms) {
  return std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
}

enum FrameType : uint16_t {
  kGetSegment = 1,  // payload: empty; reply: the segment descriptor (JSON)
  kNotify = 2,      // payload: an application message; reply: empty
  kProbe = 3,       // liveness; reply: the responder's name
  kHello = 4,       // payload: the shared secret (KVF_AUTH_TOKEN); first on a connection
                    // to a server that has one; reply: empty
  kReply = 0x80,    // success reply to any request
  kError = 0x81,    // failure reply; payload: the error text
};

constexpr uint32_t kFrameMagic = 0x4B564631;  // "KVF1"
constexpr size_t kFrameHeaderSize = 12;

struct Frame {
  uint16_t type = 0;
  std::string payload;
};

Status WriteFrame(int fd, uint16_t type, std::string_view payload, Deadline deadline);
Status ReadFrame(int fd, size_t max_payload, Deadline deadline, Frame* out);

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
// name has both, as before IPv6 support).
Status ResolveHost(const std::string& host, SocketAddress* out);
// Resolves `host` to an IPv4 address string: for the fabric's own addressing,
// which is IPv4 only.
Status ResolveIPv4(const std::string& host, std::string* ip);
// A non-blocking, close-on-exec TCP socket of `family`; `where` names the
// address it is for in the error.
Status OpenTcpSocket(int family, const std::string& where, int* fd);
// Non-blocking connect, of the family `host` resolves to, bounded by `deadline`.
Status ConnectTcp(const std::string& host, uint16_t port, Deadline deadline, int* fd);

}  // namespace kvfabric::metadata
