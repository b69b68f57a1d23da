// The store's control channel on the wire (control_server.h and
// control_client.h): frames over one persistent TCP connection per pair of
// client process and node, many requests in flight on each. Its own framing,
// distinct from the handshake's (metadata/frame.h): a handshake peer that
// reaches a control port, or the reverse, fails on the magic.
//
// A frame is a 20-byte header, every field big-endian, then the payload:
//
//   offset 0   magic    u32  "KVS" and the protocol version as a digit:
//                            0x4B565335, "KVS5"
//   offset 4   type     u16  FrameType
//   offset 6   flags    u16  0 (reserved; ignored by readers)
//   offset 8   length   u32  payload bytes: at most KVF_HANDSHAKE_MAX_FRAME,
//                            and kPreAuthMaxPayload before authentication
//   offset 12  id       u64  the request id, chosen by the client (never 0)
//                            and echoed by the reply; 0 in authentication
//                            frames and in an error about the whole connection
//
// Payloads of requests and replies are opaque bytes to the channel.
//
// With a shared secret (KVF_AUTH_TOKEN) on both sides, a connection opens with
// a mutual challenge-response (metadata/auth.h), before any request:
//
//   client -> kHello      the client's nonce (32 random bytes)
//   server -> kChallenge  the server's nonce (32) + ServerProof(token, nonces) (32)
//   client    checks the server's proof; a mismatch ends the connection
//   client -> kProof      ClientProof(token, nonces) (32)
//   server -> kWelcome    empty; requests may follow
//
// Without a token neither side sends authentication frames: requests come
// first. A refusal (a wrong proof, a request before authentication, a hello
// to a server without a token, a malformed frame) is a kError with id 0; the
// server then closes the connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>

#include "kvfabric/status.h"
#include "net/socket.h"

namespace kvfabric::store::control {

enum FrameType : uint16_t {
  kRequest = 1,    // payload: the caller's bytes
  kReply = 2,      // payload: the handler's bytes
  kError = 3,      // payload: ErrorPayload(status)
  kHello = 4,      // payload: the client's nonce
  kChallenge = 5,  // payload: the server's nonce and proof
  kProof = 6,      // payload: the client's proof
  kWelcome = 7,    // payload: empty
};

// The store's wire version: of this framing and of every message
// (messages.h). Bumped whenever either changes shape; it is the magic's last
// byte, so peers of different versions refuse each other at the first
// frame, naming both versions, instead of misreading a message. Version 1
// was the store before PUT by WRITE's reserve and commit; version 2 before
// commits that name keys, ask for slots ahead and answer with them;
// version 3 before commit replies that say where each page lies; version 4
// before hellos that say how a same-host process maps the pool (PoolShare).
constexpr uint32_t kProtocolVersion = 5;
constexpr uint32_t kMagicPrefix = 0x4B565300;  // "KVS", then the version's digit
constexpr uint32_t kMagic = kMagicPrefix | ('0' + kProtocolVersion);
constexpr size_t kHeaderSize = 20;
// Largest payload either side reads before the other has proven itself: a
// nonce, a challenge, a proof, or the text of a refusal.
constexpr size_t kPreAuthMaxPayload = 4096;
// Replies a connection may have waiting to be sent before the server gives
// up on its client as too slow to read them, and closes the connection.
constexpr size_t kMaxUnsentBytes = size_t{64} << 20;
// Past this many bytes of replies waiting for a connection, the server
// reads no more of its requests until its client has read them down.
constexpr size_t kPauseUnsentBytes = size_t{1} << 20;

struct Frame {
  uint16_t type = 0;
  uint64_t id = 0;
  std::string payload;
};

// A status as a kError payload: the code (u32, big-endian) and the message;
// and back. Every code and message come back as they were sent; a payload
// too short or with an unknown code is a ProtocolError.
std::string ErrorPayload(const Status& s);
Status StatusFromErrorPayload(std::string_view payload);

// OK when a frame's payload `length` is within `limit` (KVF_HANDSHAKE_MAX_FRAME,
// or kPreAuthMaxPayload before authentication); else the ProtocolError that
// ends the connection.
Status CheckLength(uint32_t length, size_t limit);

// Frames in from one non-blocking socket. Bytes are read in blocks, so many
// small frames cost one recv; a frame's payload grows as its bytes arrive,
// never to the length its header announces before they do.
class FrameReader {
 public:
  // Decides on a header before any of its payload is kept: OK to read the
  // frame, else the error that ends the connection.
  using HeaderCheck = std::function<Status(uint16_t type, uint32_t length)>;
  // Called with each whole frame; returns false to stop reading (the
  // connection is closing).
  using FrameSink = std::function<bool(Frame&& frame)>;

  // Hands `sink` the whole frames read before (a sink that stopped left
  // them), then reads what `fd` holds now (a bounded number of recv calls,
  // so one busy peer cannot starve others on the same thread) and hands
  // each whole frame to `sink`. OK when the socket has no more for now or the sink stopped;
  // NetworkError when the peer closed or the socket failed; ProtocolError
  // for a bad magic; the check's error for a refused header.
  Status Read(int fd, const HeaderCheck& check, const FrameSink& sink);
  void Reset();
  // Whether bytes read are not yet handed over (a sink stopped before
  // them, or a frame is incomplete): Read hands them over with no new byte.
  bool buffered() const { return end_ > begin_ || in_frame_; }

 private:
  // The next whole frame of the bytes read: true with *out; false when more
  // bytes are needed or *error is set.
  bool Next(const HeaderCheck& check, Frame* out, Status* error);

  std::string buffer_;
  size_t begin_ = 0, end_ = 0;  // unparsed bytes of buffer_
  bool in_frame_ = false;       // header parsed; gathering its payload
  uint32_t length_ = 0;
  Frame frame_;
};

// Frames out to one non-blocking socket, in order, sent with as few
// syscalls as the socket allows.
class FrameWriter {
 public:
  void Push(uint16_t type, uint64_t id, std::string payload);
  // Sends what the socket takes now. OK when it took everything or would
  // block (then bytes() > 0); NetworkError when it failed.
  Status Flush(int fd);
  size_t bytes() const { return bytes_; }
  bool empty() const { return bytes_ == 0; }
  void Reset();

 private:
  struct Out {
    char header[kHeaderSize];
    std::string payload;
  };
  std::deque<Out> frames_;
  size_t sent_ = 0;   // bytes of frames_.front() already sent
  size_t bytes_ = 0;  // unsent bytes in all
};

// The event loop's pieces both sides use: an epoll instance with an eventfd
// registered under `wake_key` (data.u64) for other threads to wake it.
Status OpenEpoll(int* epoll_fd, int* wake_fd, uint64_t wake_key);
void Wake(int wake_fd);
// Changes a registered socket's events to EPOLLIN when `in`, plus EPOLLOUT
// when `out` (EPOLLHUP and EPOLLERR are reported either way).
void Watch(int epoll_fd, int fd, uint64_t key, bool in, bool out);
// Watch with `in`.
void WatchOutput(int epoll_fd, int fd, uint64_t key, bool out);
void DrainWake(int wake_fd);
// epoll_wait's timeout for `deadline`: -1 for Deadline::max(), else the
// milliseconds left, rounded up so the wait never ends just before it.
int TimeoutMs(net::Deadline deadline);
// Reads and drops what `fd` holds; false once the peer closed or the socket failed.
bool Discard(int fd);

}  // namespace kvfabric::store::control
