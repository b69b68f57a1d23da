// Handshake wire format: a 12-byte header (magic "KVF1", type, reserved,
// payload length, all big-endian) and a payload. Every read and write has a
// deadline and the payload size is bounded, so a slow or hostile peer costs
// at most one timeout.
#pragma once

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

// "host:port" -> parts. The host may be a name or an IPv4 literal.
Status ParseHostPort(const std::string& s, std::string* host, uint16_t* port);
// Resolves `host` to an IPv4 address string.
Status ResolveIPv4(const std::string& host, std::string* ip);
// Non-blocking connect bounded by `deadline`.
Status ConnectTcp(const std::string& host, uint16_t port, Deadline deadline, int* fd);

}  // namespace kvfabric::metadata
