#include "net/address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include "common/text.h"

namespace kvfabric::net {

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
  return bracket ? text::Format("[{}]:{}", host, port) : text::Format("{}:{}", host, port);
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

namespace {
// 127.0.0.0/8; ::1, or such an IPv4 address mapped to IPv6.
bool Loopback(const in_addr& a) { return (ntohl(a.s_addr) >> 24) == 127; }
bool Loopback(const in6_addr& a) {
  return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
}
}  // namespace

bool SocketAddress::loopback() const {
  if (family() == AF_INET) return Loopback(reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr);
  return Loopback(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr);
}

bool IsLoopbackName(const std::string& host) {
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return Loopback(v4);
  in6_addr v6{};
  return inet_pton(AF_INET6, h.c_str(), &v6) == 1 && Loopback(v6);
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

bool SameEndpoint(const std::string& a, const std::string& b) {
  if (a == b) return true;
  std::string host_a, host_b;
  uint16_t port_a = 0, port_b = 0;
  if (!ParseHostPort(a, &host_a, &port_a).ok() || !ParseHostPort(b, &host_b, &port_b).ok() || port_a != port_b)
    return false;
  SocketAddress sa, sb;
  return ResolveHost(host_a, &sa).ok() && ResolveHost(host_b, &sb).ok() && sa.ip() == sb.ip();
}

}  // namespace kvfabric::net
