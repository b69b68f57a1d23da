// Handshake wire format: a 12-byte header (magic "KVF1", type, reserved,
// payload length, all big-endian) and a payload. Every read and write has a
// deadline and the payload size is bounded; a payload's memory grows as its
// bytes arrive, so a header announcing a large payload costs nothing until
// the bytes come.
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
  kHello = 4,       // payload: the client's nonce; first on a connection when the client
                    // has a token (handshake_session.h); reply: kChallenge
  kChallenge = 5,   // payload: the server's nonce and proof
  kAuth = 6,        // payload: the client's proof; reply: empty
  kNotice = 7,      // payload: a WRITE's notice (engine/notice_board.h,
                    // EncodeNoticeMessage); reply: empty
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

// Assembles one frame from a non-blocking socket as its bytes arrive, for a
// server that waits on many sockets at once. It reads exactly the frame's
// bytes (header, then payload), never into the next frame.
class FrameReader {
 public:
  // Reads what `fd` has now. OK with `*complete` set once the frame is
  // whole; NetworkError when the peer closed or the socket failed;
  // ProtocolError for a bad magic or a payload over `max_payload`.
  Status ReadSome(int fd, size_t max_payload, bool* complete);
  // The whole frame; the reader starts over for the next one.
  Frame Take();

 private:
  char header_[kFrameHeaderSize];
  size_t header_bytes_ = 0;
  size_t payload_bytes_ = 0;  // received of the announced length
  uint32_t length_ = 0;
  Frame frame_;
};

// The payload of a kError frame: "<code>:<message>", the code being
// Status::Code's number; and back (an unknown code is a ProtocolError).
std::string ErrorPayload(const Status& s);
Status StatusFromErrorPayload(const std::string& payload);

}  // namespace kvfabric::metadata
