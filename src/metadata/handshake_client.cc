#include <unistd.h>

#include "metadata/handshake.h"
#include "net/address.h"
#include "net/socket.h"

namespace kvfabric::metadata {
namespace {

Status StatusFromWire(const std::string& text) {
  auto colon = text.find(':');
  int code = colon == std::string::npos ? -1 : std::atoi(text.substr(0, colon).c_str());
  std::string msg = colon == std::string::npos ? text : text.substr(colon + 1);
  switch (static_cast<Status::Code>(code)) {
    case Status::Code::kInvalidArgument: return Status::InvalidArgument(msg);
    case Status::Code::kNotFound: return Status::NotFound(msg);
    case Status::Code::kOutOfRange: return Status::OutOfRange(msg);
    case Status::Code::kBusy: return Status::Busy(msg);
    case Status::Code::kTimeout: return Status::Timeout(msg);
    case Status::Code::kPermissionDenied: return Status::PermissionDenied(msg);
    case Status::Code::kUnavailable: return Status::Unavailable(msg);
    default: return Status::ProtocolError(msg);
  }
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
  Status s;
  Frame resp;
  if (!options.auth_token.empty()) {
    s = WriteFrame(fd, kHello, options.auth_token, deadline);
    if (s.ok()) s = ReadFrame(fd, options.max_frame, deadline, &resp);
    if (s.ok() && resp.type != kReply) {  // refused: report the server's reason
      close(fd);
      if (resp.type == kError) return StatusFromWire(resp.payload).Annotate("peer " + host_port);
      return Status::ProtocolError("handshake with " + host_port + ": unexpected reply type " +
                                   std::to_string(resp.type));
    }
  }
  if (s.ok()) s = WriteFrame(fd, type, payload, deadline);
  if (s.ok()) s = ReadFrame(fd, options.max_frame, deadline, &resp);
  close(fd);
  if (!s.ok()) return s.Annotate("handshake with " + host_port);
  if (resp.type == kError) return StatusFromWire(resp.payload).Annotate("peer " + host_port);
  if (resp.type != kReply)
    return Status::ProtocolError("handshake with " + host_port + ": unexpected reply type " +
                                 std::to_string(resp.type));
  *reply = std::move(resp.payload);
  return Status::OK();
}

}  // namespace kvfabric::metadata
