#include <unistd.h>

#include "common/text.h"
#include "metadata/handshake.h"
#include "metadata/handshake_session.h"
#include "net/address.h"
#include "net/socket.h"

namespace kvfabric::metadata {

namespace {

// What a reply frame says: OK for kReply, the server's status for kError.
Status ReplyStatus(const Frame& resp, const std::string& host_port) {
  if (resp.type == kReply) return Status::OK();
  if (resp.type == kError) return StatusFromErrorPayload(resp.payload).Annotate("peer " + host_port);
  return Status::ProtocolError(text::Format("handshake with {}: unexpected reply type {}", host_port, resp.type));
}

}  // namespace

Status HandshakeCall(const std::string& host_port, uint16_t type, std::string_view payload,
                     const CallOptions& options, std::string* reply) {
  std::string host;
  uint16_t port = 0;
  KVF_RETURN_IF_ERROR(net::ParseHostPort(host_port, &host, &port));
  const Deadline deadline = DeadlineIn(options.timeout_ms);
  int fd = -1;
  KVF_RETURN_IF_ERROR(net::ConnectTcp(host, port, deadline, &fd));
  Status io;      // the connection's own failures
  Status answer;  // what the server said, or its challenge's failure
  Frame resp;
  const bool authenticate = !options.auth_token.empty();
  if (authenticate) {
    // Challenge-response (handshake_session.h); the proof and the request
    // go out together, so authenticating costs one round trip.
    ClientChallenge challenge(options.auth_token);
    std::string proof;
    io = WriteFrame(fd, kHello, challenge.hello(), deadline);
    if (io.ok()) io = ReadFrame(fd, kPreAuthMaxReply, deadline, &resp);
    if (io.ok()) answer = challenge.Answer(resp, &proof).Annotate("peer " + host_port);
    if (io.ok() && answer.ok()) io = WriteFrame(fd, kAuth, proof, deadline);
  }
  if (io.ok() && answer.ok()) io = WriteFrame(fd, type, payload, deadline);
  if (authenticate && io.ok() && answer.ok()) {  // the reply to the proof comes first
    io = ReadFrame(fd, options.max_frame, deadline, &resp);
    if (io.ok()) answer = ReplyStatus(resp, host_port);
  }
  if (io.ok() && answer.ok()) io = ReadFrame(fd, options.max_frame, deadline, &resp);
  if (io.ok() && answer.ok()) answer = ReplyStatus(resp, host_port);
  close(fd);
  if (!answer.ok()) return answer;
  if (!io.ok()) return io.Annotate("handshake with " + host_port);
  *reply = std::move(resp.payload);
  return Status::OK();
}

}  // namespace kvfabric::metadata
