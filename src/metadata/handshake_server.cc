#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "common/text.h"
#include "metadata/handshake.h"
#include "net/address.h"
#include "net/socket.h"

namespace kvfabric::metadata {

Status HandshakeServer::Start(const Options& options, Handler handler,
                             std::unique_ptr<HandshakeServer>* out) {
  std::unique_ptr<HandshakeServer> s(new HandshakeServer());
  s->options_ = options;
  s->handler_ = std::move(handler);
  // The family follows the address: an IPv6 host gets an AF_INET6 socket
  // bound to exactly that address (IPV6_V6ONLY stays the system default).
  net::SocketAddress sa;
  KVF_RETURN_IF_ERROR(net::ResolveHost(options.host, &sa).Annotate("handshake server"));
  sa.set_port(options.port);
  const std::string where = net::FormatHostPort(options.host, options.port);
  KVF_RETURN_IF_ERROR(net::OpenTcpSocket(sa.family(), where, &s->listen_fd_).Annotate("handshake server"));
  int one = 1;
  setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(s->listen_fd_, sa.get(), sa.length) != 0)
    return Status::NetworkError("handshake server cannot bind " + where + ": " + std::strerror(errno) +
                                " (choose another port or a local address)");
  if (listen(s->listen_fd_, 128) != 0)
    return Status::NetworkError("listen on " + where + ": " + std::strerror(errno));
  socklen_t len = sizeof(sa.storage);
  getsockname(s->listen_fd_, sa.get(), &len);
  s->port_ = sa.port();
  s->stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  HandshakeServer* raw = s.get();
  s->acceptor_ = std::thread([raw] { raw->AcceptLoop(); });
  *out = std::move(s);
  return Status::OK();
}

HandshakeServer::~HandshakeServer() {
  stop_.store(true);
  if (stop_fd_ >= 0) {
    uint64_t one = 1;
    ssize_t r = write(stop_fd_, &one, sizeof(one));
    (void)r;
  }
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& c : connections_) shutdown(c.fd, SHUT_RDWR);
  }
  for (auto& c : connections_)
    if (c.thread.joinable()) c.thread.join();
  for (auto& c : connections_) close(c.fd);
  if (listen_fd_ >= 0) close(listen_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
}

void HandshakeServer::ReapLocked() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->done.load()) {
      it->thread.join();
      close(it->fd);
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void HandshakeServer::AcceptLoop() {
  while (!stop_.load()) {
    bool full;
    {
      std::lock_guard<std::mutex> g(mu_);
      ReapLocked();
      full = connections_.size() >= options_.max_connections;
    }
    // At the limit, stop accepting: further clients wait in the listen
    // backlog (bounded by their own timeout) instead of being refused.
    pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    int rc = poll(fds, full ? 1 : 2, full ? 20 : 1000);
    if (rc <= 0 || stop_.load() || full || !(fds[1].revents & POLLIN)) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> g(mu_);
    connections_.emplace_back();
    Connection* c = &connections_.back();
    c->fd = fd;
    c->thread = std::thread([this, c] { Serve(c); });
  }
}

namespace {

// Compares without an early exit, so the time taken says nothing about the secret.
bool SameSecret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0, n = std::max(a.size(), b.size()); i < n; ++i)
    diff |= static_cast<unsigned char>((i < a.size() ? a[i] : 0) ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

}  // namespace

void HandshakeServer::Serve(Connection* c) {
  bool authenticated = options_.auth_token.empty();
  while (!stop_.load()) {
    Frame req;
    // A client gets one timeout to send each request: idle or slow ones are dropped.
    Status s = ReadFrame(c->fd, options_.max_frame, DeadlineIn(options_.timeout_ms), &req);
    if (!s.ok()) {
      if (s.code() == Status::Code::kProtocolError) {
        KVF_LOG_WARN("handshake server on port {}: {}; closing the connection", port_, s.message());
        // Best effort: the connection closes either way.
        (void)WriteFrame(c->fd, kError, ErrorPayload(s), DeadlineIn(options_.timeout_ms));
      }
      break;
    }
    std::string reply;
    Status hs;
    if (req.type == kHello) {
      if (authenticated || SameSecret(req.payload, options_.auth_token)) authenticated = true;
      else hs = Status::PermissionDenied("wrong KVF_AUTH_TOKEN: this engine refuses the connection");
    } else if (!authenticated) {
      hs = Status::PermissionDenied("this engine requires a shared secret: set KVF_AUTH_TOKEN on both sides");
    } else if (req.type == kGetSegment || req.type == kNotify || req.type == kProbe) {
      hs = handler_(req.type, req.payload, &reply);
    } else {
      hs = Status::ProtocolError(text::Format("unknown handshake request type {}", req.type));
    }
    Status ws;
    if (hs.ok()) {
      ws = WriteFrame(c->fd, kReply, reply, DeadlineIn(options_.timeout_ms));
    } else {
      ws = WriteFrame(c->fd, kError, ErrorPayload(hs), DeadlineIn(options_.timeout_ms));
      if (hs.code() == Status::Code::kProtocolError || hs.code() == Status::Code::kPermissionDenied) {
        if (hs.code() == Status::Code::kPermissionDenied)
          KVF_LOG_WARN("handshake server on port {}: refused a client: {}", port_, hs.message());
        break;
      }
    }
    if (!ws.ok()) break;
  }
  shutdown(c->fd, SHUT_RDWR);
  c->done.store(true);
}

}  // namespace kvfabric::metadata
