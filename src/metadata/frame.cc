#include "metadata/frame.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvfabric::metadata {
namespace {

int RemainingMs(Deadline d) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - std::chrono::steady_clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

// Waits for `events` on fd; false on timeout.
bool WaitFd(int fd, short events, Deadline d) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, RemainingMs(d));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return true;  // let the following call report the error
  }
}

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

Status ReadFrame(int fd, size_t max_payload, Deadline deadline, Frame* out) {
  char hdr[kFrameHeaderSize];
  KVF_RETURN_IF_ERROR(IoAll(fd, hdr, sizeof(hdr), false, deadline));
  if (Get32(hdr) != kFrameMagic)
    return Status::ProtocolError("handshake frame has a bad magic number (not a kvfabric peer?)");
  const uint32_t len = Get32(hdr + 8);
  if (len > max_payload)
    return Status::ProtocolError("handshake frame of " + std::to_string(len) + " bytes exceeds the limit of " +
                                 std::to_string(max_payload) + " (KVF_HANDSHAKE_MAX_FRAME)");
  out->type = Get16(hdr + 4);
  out->payload.assign(len, '\0');
  return IoAll(fd, out->payload.data(), len, false, deadline);
}

Status ParseHostPort(const std::string& s, std::string* host, uint16_t* port) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
    return Status::InvalidArgument("'" + s + "' is not host:port");
  char* end = nullptr;
  long p = std::strtol(s.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || p < 0 || p > 65535)
    return Status::InvalidArgument("'" + s + "': port must be 0-65535");
  *host = s.substr(0, colon);
  *port = static_cast<uint16_t>(p);
  return Status::OK();
}

Status ResolveIPv4(const std::string& host, std::string* ip) {
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) == 1) {
    *ip = host;
    return Status::OK();
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr)
    return Status::NotFound("cannot resolve host '" + host + "': " + gai_strerror(rc));
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof(buf));
  freeaddrinfo(res);
  *ip = buf;
  return Status::OK();
}

Status ConnectTcp(const std::string& host, uint16_t port, Deadline deadline, int* fd_out) {
  std::string ip;
  KVF_RETURN_IF_ERROR(ResolveIPv4(host, &ip));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  inet_pton(AF_INET, ip.c_str(), &sa.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::NetworkError(std::string("socket: ") + std::strerror(errno));
  const std::string where = host + ":" + std::to_string(port);
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  if (rc != 0 && errno != EINPROGRESS) {
    int e = errno;
    close(fd);
    return Status::NetworkError("connect to " + where + " failed: " + std::strerror(e) +
                                " (is a kvfabric engine serving that segment?)");
  }
  if (rc != 0) {
    if (!WaitFd(fd, POLLOUT, deadline)) {
      close(fd);
      return Status::Timeout("connect to " + where + " timed out");
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      close(fd);
      return Status::NetworkError("connect to " + where + " failed: " + std::strerror(err) +
                                  " (is a kvfabric engine serving that segment?)");
    }
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  *fd_out = fd;
  return Status::OK();
}

}  // namespace kvfabric::metadata
