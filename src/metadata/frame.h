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
#include "net/socket.h"

namespace kvfabric::metadata {

using net::Deadline;
using net::DeadlineIn;

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

// The payload of a kError frame: "<code>:<message>", the code being
// Status::Code's number; and back (an unknown code is a ProtocolError).
std::string ErrorPayload(const Status& s);
Status StatusFromErrorPayload(const std::string& payload);

}  // namespace kvfabric::metadata
