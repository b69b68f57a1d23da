#include "metadata/frame.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/text.h"

namespace kvfabric::metadata {
namespace {

using net::WaitFd;

Status IoAll(int fd, char* buf, size_t len, bool writing, Deadline d) {
  size_t done = 0;
  while (done < len) {
    if (!WaitFd(fd, writing ? POLLOUT : POLLIN, d))
      return Status::Timeout(std::string("handshake ") + (writing ? "send" : "receive") + " timed out");
    ssize_t n = writing ? send(fd, buf + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, buf + done, len - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return Status::NetworkError("handshake connection closed by peer");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
    return Status::NetworkError(std::string("handshake ") + (writing ? "send" : "receive") +
                                " failed: " + std::strerror(errno));
  }
  return Status::OK();
}

void Put32(char* p, uint32_t v) { v = htonl(v); std::memcpy(p, &v, 4); }
void Put16(char* p, uint16_t v) { v = htons(v); std::memcpy(p, &v, 2); }
uint32_t Get32(const char* p) { uint32_t v; std::memcpy(&v, p, 4); return ntohl(v); }
uint16_t Get16(const char* p) { uint16_t v; std::memcpy(&v, p, 2); return ntohs(v); }

}  // namespace

Status WriteFrame(int fd, uint16_t type, std::string_view payload, Deadline deadline) {
  if (payload.size() > UINT32_MAX) return Status::InvalidArgument("handshake frame too large");
  char hdr[kFrameHeaderSize];
  Put32(hdr, kFrameMagic);
  Put16(hdr + 4, type);
  Put16(hdr + 6, 0);
  Put32(hdr + 8, static_cast<uint32_t>(payload.size()));
  KVF_RETURN_IF_ERROR(IoAll(fd, hdr, sizeof(hdr), true, deadline));
  return IoAll(fd, const_cast<char*>(payload.data()), payload.size(), true, deadline);
}

Status FrameReader::ReadSome(int fd, size_t max_payload, bool* complete) {
  *complete = false;
  while (true) {
    char* dst;
    size_t want;
    if (header_bytes_ < kFrameHeaderSize) {
      dst = header_ + header_bytes_;
      want = kFrameHeaderSize - header_bytes_;
    } else {
      // Grow with the bytes that come, not with the length announced.
      constexpr size_t kStep = 64 << 10;
      if (frame_.payload.size() == payload_bytes_)
        frame_.payload.resize(payload_bytes_ + std::min<size_t>(kStep, length_ - payload_bytes_));
      dst = frame_.payload.data() + payload_bytes_;
      want = frame_.payload.size() - payload_bytes_;
    }
    if (want == 0) {  // an empty payload
      *complete = true;
      return Status::OK();
    }
    const ssize_t n = recv(fd, dst, want, MSG_DONTWAIT);
    if (n == 0) return Status::NetworkError("handshake connection closed by peer");
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::OK();
      if (errno == EINTR) continue;
      return Status::NetworkError(std::string("handshake receive failed: ") + std::strerror(errno));
    }
    if (header_bytes_ < kFrameHeaderSize) {
      header_bytes_ += static_cast<size_t>(n);
      if (header_bytes_ < kFrameHeaderSize) continue;
      if (Get32(header_) != kFrameMagic)
        return Status::ProtocolError("handshake frame has a bad magic number (not a kvfabric peer?)");
      length_ = Get32(header_ + 8);
      if (length_ > max_payload)
        return Status::ProtocolError(text::Format(
            "handshake frame of {} bytes exceeds the limit of {} (KVF_HANDSHAKE_MAX_FRAME)", length_, max_payload));
      frame_.type = Get16(header_ + 4);
      frame_.payload.clear();
    } else {
      payload_bytes_ += static_cast<size_t>(n);
    }
    if (header_bytes_ == kFrameHeaderSize && payload_bytes_ == length_) {
      *complete = true;
      return Status::OK();
    }
  }
}

Frame FrameReader::Take() {
  Frame f = std::move(frame_);
  frame_ = Frame();
  header_bytes_ = payload_bytes_ = 0;
  length_ = 0;
  return f;
}

Status ReadFrame(int fd, size_t max_payload, Deadline deadline, Frame* out) {
  FrameReader reader;
  bool complete = false;
  while (true) {
    KVF_RETURN_IF_ERROR(reader.ReadSome(fd, max_payload, &complete));
    if (complete) break;
    if (!WaitFd(fd, POLLIN, deadline)) return Status::Timeout("handshake receive timed out");
  }
  *out = reader.Take();
  return Status::OK();
}

std::string ErrorPayload(const Status& s) { return text::Format("{}:{}", static_cast<int>(s.code()), s.message()); }

Status StatusFromErrorPayload(const std::string& text) {
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

}  // namespace kvfabric::metadata
