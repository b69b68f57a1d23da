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

namespace {

// 1-5 digits, at most 65535 (strtol would also take signs and spaces).
bool ParsePort(std::string_view text, uint16_t* port) {
  if (text.empty() || text.size() > 5) return false;
  uint32_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v > 65535) return false;
  *port = static_cast<uint16_t>(v);
  return true;
}

// Splits `s` into its host (brackets removed) and the position of the colon
// before the port (npos when there is none).
Status SplitHost(const std::string& s, std::string* host, size_t* colon) {
  if (s.empty() || s.front() != '[') {
    if (s.find_first_of("[]") != std::string::npos)
      return Status::InvalidArgument("'" + s + "': brackets must enclose an IPv6 address, as in [::1]:15000");
    *colon = s.find(':');
    if (*colon != s.rfind(':'))
      return Status::InvalidArgument("'" + s + "' looks like a bare IPv6 address: write it as [addr]:port, " +
                                     "as in [::1]:15000");
    *host = s.substr(0, *colon);
    return Status::OK();
  }
  const size_t end = s.find(']');
  if (end == std::string::npos)
    return Status::InvalidArgument("'" + s + "': no ']' after the IPv6 address; write [addr]:port");
  *host = s.substr(1, end - 1);
  if (host->find(':') == std::string::npos || host->find('[') != std::string::npos)
    return Status::InvalidArgument("'" + s + "': brackets are for IPv6 addresses, as in [::1]:15000");
  *colon = end + 1 < s.size() ? end + 1 : std::string::npos;
  if (*colon != std::string::npos && s[*colon] != ':')
    return Status::InvalidArgument("'" + s + "': expected ':port' after ']'");
  return Status::OK();
}

}  // namespace

Status ParseHostPort(const std::string& s, std::string* host, uint16_t* port) {
  std::string h;
  size_t colon = std::string::npos;
  KVF_RETURN_IF_ERROR(SplitHost(s, &h, &colon));
  if (h.empty() || colon == std::string::npos || colon + 1 == s.size())
    return Status::InvalidArgument("'" + s + "' is not host:port (or [v6addr]:port)");
  uint16_t p = 0;
  if (!ParsePort(std::string_view(s).substr(colon + 1), &p))
    return Status::InvalidArgument("'" + s + "': port must be 0-65535");
  *host = std::move(h);
  *port = p;
  return Status::OK();
}

std::string FormatHostPort(const std::string& host, uint16_t port) {
  const bool bracket = host.find(':') != std::string::npos && host.front() != '[';
  return (bracket ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string SocketAddress::ip() const {
  char buf[NI_MAXHOST] = {0};
  if (getnameinfo(get(), length, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return buf;
}

uint16_t SocketAddress::port() const {
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
}

void SocketAddress::set_port(uint16_t port) {
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
  else reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
}

bool SocketAddress::loopback() const {
  if (family() == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr) >> 24) == 127;
  const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
}

Status ResolveHost(const std::string& host, SocketAddress* out) {
  if (host.empty()) return Status::InvalidArgument("empty host name");
  // Only an IPv6 literal has a colon; parsing it numerically keeps a
  // mistyped one from going to DNS.
  const bool v6_literal = host.find(':') != std::string::npos;
  addrinfo hints{};
  hints.ai_family = v6_literal ? AF_INET6 : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = v6_literal ? AI_NUMERICHOST : 0;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    if (v6_literal) return Status::InvalidArgument("'" + host + "' is not a valid IPv6 address");
    return Status::NotFound("cannot resolve host '" + host + "': " + gai_strerror(rc) +
                            " (check the name, or give an IP address)");
  }
  const addrinfo* pick = nullptr;
  for (const addrinfo* a = res; a != nullptr && pick == nullptr; a = a->ai_next)
    if (a->ai_family == AF_INET) pick = a;
  for (const addrinfo* a = res; a != nullptr && pick == nullptr; a = a->ai_next)
    if (a->ai_family == AF_INET6) pick = a;
  if (pick != nullptr) {
    *out = SocketAddress{};
    std::memcpy(&out->storage, pick->ai_addr, pick->ai_addrlen);
    out->length = pick->ai_addrlen;
  }
  freeaddrinfo(res);
  if (pick == nullptr) return Status::NotFound("host '" + host + "' has no IPv4 or IPv6 address");
  return Status::OK();
}

Status ResolveIPv4(const std::string& host, std::string* ip) {
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) == 1) {
    *ip = host;
    return Status::OK();
  }
  if (host.find(':') != std::string::npos)
    return Status::InvalidArgument("'" + host + "' is an IPv6 address, but this needs IPv4: give an IPv4 "
                                   "address or a name that has one");
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

Status OpenTcpSocket(int family, const std::string& where, int* fd) {
  *fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (*fd >= 0) return Status::OK();
  const int e = errno;
  return Status::NetworkError("cannot open a " + std::string(family == AF_INET6 ? "IPv6" : "IPv4") +
                              " socket for " + where + ": " + std::strerror(e) +
                              (family == AF_INET6 ? " (is IPv6 enabled on this host?)" : ""));
}

namespace {

// Waits for a non-blocking connect that is in progress; closes fd on failure.
Status FinishConnect(int fd, const std::string& where, Deadline deadline) {
  if (!WaitFd(fd, POLLOUT, deadline)) {
    close(fd);
    return Status::Timeout("connect to " + where + " timed out");
  }
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err == 0) return Status::OK();
  close(fd);
  return Status::NetworkError("connect to " + where + " failed: " + std::strerror(err) +
                              " (is a kvfabric engine serving that segment?)");
}

}  // namespace

Status ConnectTcp(const std::string& host, uint16_t port, Deadline deadline, int* fd_out) {
  SocketAddress sa;
  KVF_RETURN_IF_ERROR(ResolveHost(host, &sa));
  sa.set_port(port);
  const std::string where = FormatHostPort(host, port);
  int fd = -1;
  KVF_RETURN_IF_ERROR(OpenTcpSocket(sa.family(), where, &fd));
  if (connect(fd, sa.get(), sa.length) != 0) {
    if (errno != EINPROGRESS) {
      const int e = errno;
      close(fd);
      return Status::NetworkError("connect to " + where + " failed: " + std::strerror(e) +
                                  " (is a kvfabric engine serving that segment?)");
    }
    KVF_RETURN_IF_ERROR(FinishConnect(fd, where, deadline));
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  *fd_out = fd;
  return Status::OK();
}

}  // namespace kvfabric::metadata
