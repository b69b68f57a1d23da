#include <unistd.h>

#include "common/text.h"
#include "metadata/handshake.h"
#include "metadata/handshake_session.h"
#include "net/address.h"
#include "net/socket.h"

namespace kvfabric::metadata {

Status HandshakeCall(const std::string& host_port, uint16_t type, std::string_view payload,
                     const CallOptions& options, std::string* reply) {
  std::string host;
  uint16_t port = 0;
  KVF_RETURN_IF_ERROR(net::ParseHostPort(host_port, &host, &port));
  const Deadline deadline = DeadlineIn(options.timeout_ms);
  int fd = -1;
  KVF_RETURN_IF_ERROR(net::ConnectTcp(host, port, deadline, &fd));
  Status s;
  Frame resp;
  if (!options.auth_token.empty()) {
    // Challenge-response (handshake_session.h); the proof and the request
    // go out together, so authenticating costs one round trip.
    ClientChallenge challenge(options.auth_token);
    std::string proof;
    s = WriteFrame(fd, kHello, challenge.hello(), deadline);
    if (s.ok()) s = ReadFrame(fd, kPreAuthMaxReply, deadline, &resp);
    if (s.ok()) {
      Status answered = challenge.Answer(resp, &proof);
      if (!answered.ok()) {
        close(fd);
        return answered.Annotate("peer " + host_port);
      }
      s = WriteFrame(fd, kAuth, proof, deadline);
    }
    if (s.ok()) s = WriteFrame(fd, type, payload, deadline);
    if (s.ok()) s = ReadFrame(fd, options.max_frame, deadline, &resp);
    if (s.ok() && resp.type != kReply) {  // refused: report the server's reason
      close(fd);
      if (resp.type == kError) return StatusFromErrorPayload(resp.payload).Annotate("peer " + host_port);
      return Status::ProtocolError(text::Format("handshake with {}: unexpected reply type {}", host_port, resp.type));
    }
  } else {
    s = WriteFrame(fd, type, payload, deadline);
  }
  if (s.ok()) s = ReadFrame(fd, options.max_frame, deadline, &resp);
  close(fd);
  if (!s.ok()) return s.Annotate("handshake with " + host_port);
  if (resp.type == kError) return StatusFromErrorPayload(resp.payload).Annotate("peer " + host_port);
  if (resp.type != kReply)
    return Status::ProtocolError(text::Format("handshake with {}: unexpected reply type {}", host_port, resp.type));
  *reply = std::move(resp.payload);
  return Status::OK();
}

}  // namespace kvfabric::metadata
