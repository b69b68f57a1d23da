#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

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
  s->max_pending_ = std::max<size_t>(256, 4 * options.max_connections);
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

void HandshakeServer::AcceptPending() {
  for (int burst = 0; burst < 64; ++burst) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    if (pending_.size() >= max_pending_) {
      auto victim = std::find_if(pending_.begin(), pending_.end(), [](const Pending& p) { return !p.ready; });
      if (victim == pending_.end()) {  // all proven, waiting for threads: the newcomer goes
        close(fd);
        continue;
      }
      KVF_LOG_DEBUG("handshake server on port {}: {} connections wait to authenticate; closing the oldest", port_,
                    pending_.size());
      close(victim->fd);
      pending_.erase(victim);
    }
    Pending& p = pending_.emplace_back();
    p.fd = fd;
    p.accepted = DeadlineIn(0);
    p.proof_by = DeadlineIn(options_.auth_timeout_ms);
    p.session = std::make_unique<ServerSession>(options_.auth_token, options_.max_frame, options_.max_requests,
                                                &handler_);
  }
}

bool HandshakeServer::AdvancePending(Pending* p) {
  bool complete = false;
  Status s = p->reader.ReadSome(p->fd, p->session->max_frame(), &complete);
  if (!s.ok()) {
    DropUnreadable(p->fd, s, DeadlineIn(0));
    return false;
  }
  if (!complete) return true;
  Frame frame = p->reader.Take();
  if (p->session->authenticated()) {  // no token: the first request, for the thread to answer
    p->first_request = std::move(frame);
    p->ready = true;
    return true;
  }
  // A challenge or an error is a few bytes a fresh socket always takes.
  if (!Answer(p->fd, p->session->OnFrame(frame), DeadlineIn(0))) return false;
  p->ready = p->session->authenticated();
  return true;
}

void HandshakeServer::StartReady() {
  std::lock_guard<std::mutex> g(mu_);
  ReapLocked();
  for (auto it = pending_.begin(); it != pending_.end() && connections_.size() < options_.max_connections;) {
    if (!it->ready) {
      ++it;
      continue;
    }
    Connection& c = connections_.emplace_back();
    c.fd = it->fd;
    c.end_of_life = it->accepted + std::chrono::milliseconds(options_.lifetime_ms);
    c.session = std::move(it->session);
    c.first_request = std::move(it->first_request);
    Connection* raw = &c;
    c.thread = std::thread([this, raw] { Serve(raw); });
    it = pending_.erase(it);
  }
}

void HandshakeServer::AcceptLoop() {
  std::vector<pollfd> fds;
  std::vector<std::list<Pending>::iterator> polled;
  while (!stop_.load()) {
    StartReady();
    // Connections past their deadline to prove themselves are closed.
    const auto now = std::chrono::steady_clock::now();
    Deadline next = now + std::chrono::seconds(1);
    bool waiting_for_threads = false;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (!it->ready && it->proof_by <= now) {
        close(it->fd);
        it = pending_.erase(it);
        continue;
      }
      if (it->ready) waiting_for_threads = true;
      else next = std::min(next, it->proof_by);
      ++it;
    }
    fds.assign({{stop_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}});
    polled.clear();
    for (auto it = pending_.begin(); it != pending_.end(); ++it)
      if (!it->ready) {
        fds.push_back({it->fd, POLLIN, 0});
        polled.push_back(it);
      }
    const int timeout = waiting_for_threads ? 20 : std::max(1, net::RemainingMs(next));
    if (poll(fds.data(), fds.size(), timeout) <= 0 || stop_.load()) continue;
    for (size_t i = 0; i < polled.size(); ++i)
      if (fds[i + 2].revents != 0 && !AdvancePending(&*polled[i])) {
        close(polled[i]->fd);
        pending_.erase(polled[i]);
      }
    if (fds[1].revents & POLLIN) AcceptPending();
  }
  for (auto& p : pending_) close(p.fd);
  pending_.clear();
}

bool HandshakeServer::Answer(int fd, const ServerSession::Step& step, Deadline deadline) {
  if (step.type == kError && step.close) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    KVF_LOG_WARN("handshake server on port {}: refused a client: {}", port_, step.status.message());
  }
  return WriteFrame(fd, step.type, step.payload, deadline).ok() && !step.close;
}

void HandshakeServer::DropUnreadable(int fd, const Status& read_error, Deadline deadline) {
  if (read_error.code() != Status::Code::kProtocolError) return;  // closed or timed out: nobody to tell
  refused_.fetch_add(1, std::memory_order_relaxed);
  KVF_LOG_WARN("handshake server on port {}: {}; closing the connection", port_, read_error.message());
  (void)WriteFrame(fd, kError, ErrorPayload(read_error), deadline);
}

void HandshakeServer::Serve(Connection* c) {
  ServerSession& session = *c->session;
  bool open = true;
  if (c->first_request) {
    open = Answer(c->fd, session.OnFrame(*c->first_request), DeadlineIn(options_.timeout_ms));
    c->first_request.reset();
  }
  while (open && !stop_.load()) {
    Frame req;
    Status s = ReadFrame(c->fd, session.max_frame(), std::min(DeadlineIn(options_.timeout_ms), c->end_of_life), &req);
    if (!s.ok()) {
      DropUnreadable(c->fd, s, DeadlineIn(options_.timeout_ms));
      break;
    }
    open = Answer(c->fd, session.OnFrame(req), DeadlineIn(options_.timeout_ms));
  }
  shutdown(c->fd, SHUT_RDWR);
  c->done.store(true);
}

}  // namespace kvfabric::metadata
