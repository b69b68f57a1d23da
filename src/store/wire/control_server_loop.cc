// ControlServer's thread: accepting connections, reading frames,
// authenticating clients, handing requests to the handler, and
// back-pressure (a connection whose replies back up is not read).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/crypto.h"
#include "common/log.h"
#include "common/text.h"
#include "metadata/auth.h"
#include "store/wire/control_server_loop.h"

namespace kvfabric::store {

using namespace control;  // NOLINT: the wire's names, in this file only
using net::Deadline;

void ControlServer::Loop::CloseAll() {
  std::lock_guard<std::mutex> g(mu);
  for (auto& [key, c] : connections) close(c->fd);
  connections.clear();
  count.store(0);
  for (int* fd : {&listen_fd, &epoll_fd, &wake_fd}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

void ControlServer::Loop::Run() {
  {
    std::lock_guard<std::mutex> g(mu);
    thread_id = std::this_thread::get_id();
  }
  epoll_event events[64];
  while (!stopping.load()) {
    const int n = epoll_wait(epoll_fd, events, static_cast<int>(std::size(events)), TimeoutMs());
    if (stopping.load()) break;
    for (int i = 0; i < n; ++i) {
      const uint64_t key = events[i].data.u64;
      if (key == kListenerKey) {
        Accept();
        continue;
      }
      if (key == kWakeKey) {
        control::DrainWake(wake_fd);
        continue;
      }
      Connection* c = Find(key);
      if (c == nullptr) continue;  // closed earlier in this round
      if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) OnReadable(c);
      c = Find(key);
      if (c != nullptr && (events[i].events & EPOLLOUT)) {
        std::lock_guard<std::mutex> g(mu);
        FlushLocked(c);
        if (!c->broken.empty()) MarkDirtyLocked(key);
        SyncOutputLocked(c);
      }
    }
    // A connection Throttle resumed may have read requests whose replies
    // are queued now: sent before the thread waits again.
    do ProcessDirty();
    while (Throttle());
    ExpireDeadlines();
  }
}

int ControlServer::Loop::TimeoutMs() const {
  Deadline next = Deadline::max();
  if (!deadlines.empty()) next = deadlines.front().first;
  if (accept_paused) next = std::min(next, accept_resume);
  return control::TimeoutMs(next);
}

void ControlServer::Loop::Accept() {
  for (int i = 0; i < kAcceptsPerEvent; ++i) {
    net::SocketAddress peer;
    peer.length = sizeof(peer.storage);
    const int fd = accept4(listen_fd, peer.get(), &peer.length, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of descriptors or memory: the listener stays readable, so wait
      // a moment instead of spinning on it.
      KVF_LOG_WARN("store control server on {}: cannot accept a connection: {} (raise the open-file limit, "
                   "ulimit -n); trying again in {} ms",
                   address, std::strerror(errno), kAcceptPause.count());
      epoll_event ev{};
      ev.data.u64 = kListenerKey;
      epoll_ctl(epoll_fd, EPOLL_CTL_MOD, listen_fd, &ev);
      accept_paused = true;
      accept_resume = std::chrono::steady_clock::now() + kAcceptPause;
      return;
    }
    if (count.load() >= max_connections && !MakeRoom()) {
      close(fd);
      if (refused++ == 0)
        KVF_LOG_WARN("store control server on {}: {} connections open, the limit (KVF_STORE_MAX_CONNECTIONS); "
                     "closing new ones until some end (raise the limit if more client processes use this node)",
                     address, max_connections);
      continue;
    }
    if (refused > 0) {
      KVF_LOG_INFO("store control server on {}: accepting connections again, after closing {} at the limit",
                   address, refused);
      refused = 0;
    }
    Add(fd, peer);
  }
}

bool ControlServer::Loop::Unproven(const Connection& c) const {
  if (c.state == Connection::State::kReady) return token.empty() && !c.served;
  return c.state != Connection::State::kDraining;
}

bool ControlServer::Loop::MakeRoom() {
  Connection* oldest = nullptr;
  for (auto& [key, c] : connections)
    if (Unproven(*c) && (oldest == nullptr || key < oldest->key)) oldest = c.get();
  if (oldest == nullptr) return false;
  KVF_LOG_DEBUG("store control server on {}: closing the connection from {} to make room: it has not {} yet, and "
                "{} connections are open (KVF_STORE_MAX_CONNECTIONS)",
                address, oldest->peer, token.empty() ? "sent a request" : "authenticated", connections.size());
  Close(oldest);
  return true;
}

void ControlServer::Loop::Add(int fd, const net::SocketAddress& peer) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  auto c = std::make_unique<Connection>();
  c->key = next_key++;
  c->fd = fd;
  c->peer = net::FormatHostPort(peer.ip(), peer.port());
  // Authenticated (with a token) or its first request sent (without one)
  // within the time, or closed (ExpireDeadlines).
  if (!token.empty()) c->state = Connection::State::kAwaitHello;
  deadlines.emplace_back(std::chrono::steady_clock::now() + auth_timeout, c->key);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = c->key;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  std::lock_guard<std::mutex> g(mu);
  connections.emplace(c->key, std::move(c));
  count.fetch_add(1);
}

void ControlServer::Loop::OnReadable(Connection* c) {
  if (c->paused) {  // not watched for input: hung up, or failed
    Close(c);
    return;
  }
  if (c->state == Connection::State::kReady) {
    std::lock_guard<std::mutex> g(mu);
    if (BackloggedLocked(*c)) return PauseLocked(c);  // replies sent later left it backlogged
  }
  if (c->state == Connection::State::kDraining) {  // refused: read and drop until the client closes
    if (!control::Discard(c->fd)) Close(c);
    return;
  }
  Status s = c->reader.Read(
      c->fd, [&](uint16_t type, uint32_t length) { return CheckHeader(*c, type, length); },
      [&](Frame&& f) { return OnFrame(c, std::move(f)); });
  if (s.ok()) return;
  if (s.code() == Status::Code::kNetworkError) {  // the client went away: nobody to tell
    KVF_LOG_DEBUG("store control server on {}: connection from {} ended: {}", address, c->peer, s.message());
    Close(c);
    return;
  }
  Refuse(c, s);
}

Status ControlServer::Loop::CheckHeader(const Connection& c, uint16_t type, uint32_t length) const {
  using State = Connection::State;
  const uint16_t expected = c.state == State::kReady ? kRequest : c.state == State::kAwaitHello ? kHello : kProof;
  if (type != expected) {
    if (type == kRequest)
      return Status::PermissionDenied("this store node requires authentication: set KVF_AUTH_TOKEN in the client "
                                      "process to the node's token");
    if (type == kHello && token.empty())
      return Status::PermissionDenied("this store node has no KVF_AUTH_TOKEN but the client has one: set the same "
                                      "token (or none) in both processes");
    return Status::ProtocolError(text::Format("unexpected frame type {} (expected {})", type, expected));
  }
  return CheckLength(length, c.state == State::kReady ? max_frame : kPreAuthMaxPayload);
}

bool ControlServer::Loop::OnFrame(Connection* c, Frame&& f) {
  using State = Connection::State;
  switch (c->state) {
    case State::kReady:
      if (f.id == 0) {
        Refuse(c, Status::ProtocolError("request with id 0"));
        return false;
      }
      c->served = true;
      handler(c->key, std::move(f.payload), MakeReply(c->key, f.id));
      {
        std::lock_guard<std::mutex> g(mu);
        if (!BackloggedLocked(*c)) return true;
        PauseLocked(c);  // the frames read after this one wait in the reader
      }
      return false;
    case State::kAwaitHello: {
      if (f.payload.size() != metadata::auth::kNonceSize) {
        Refuse(c, Status::ProtocolError(text::Format("hello of {} bytes", f.payload.size())));
        return false;
      }
      c->client_nonce = std::move(f.payload);
      c->server_nonce = metadata::auth::NewNonce();
      std::lock_guard<std::mutex> g(mu);
      EnqueueLocked(c, kChallenge, 0,
                    c->server_nonce + metadata::auth::ServerProof(token, c->client_nonce, c->server_nonce));
      c->state = State::kAwaitProof;
      return true;
    }
    case State::kAwaitProof: {
      if (!crypto::SameBytes(f.payload, metadata::auth::ClientProof(token, c->client_nonce, c->server_nonce))) {
        Refuse(c, Status::PermissionDenied("the client's authentication proof does not match: its KVF_AUTH_TOKEN "
                                           "differs from this store node's"));
        return false;
      }
      std::lock_guard<std::mutex> g(mu);
      EnqueueLocked(c, kWelcome, 0, {});
      c->state = State::kReady;
      return true;
    }
    case State::kDraining: return false;
  }
  return false;
}

void ControlServer::Loop::Refuse(Connection* c, const Status& status) {
  KVF_LOG_WARN("store control server on {}: closing the connection from {}: {}", address, c->peer,
               status.ToString());
  c->state = Connection::State::kDraining;
  deadlines.emplace_back(std::chrono::steady_clock::now() + auth_timeout, c->key);
  std::lock_guard<std::mutex> g(mu);
  EnqueueLocked(c, kError, 0, ErrorPayload(status));
  c->closing = true;  // the write side is shut once the error is out (SyncOutputLocked)
}

void ControlServer::Loop::Close(Connection* c) {
  const uint64_t key = c->key;
  const bool served = c->served;
  {
    std::lock_guard<std::mutex> g(mu);
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, nullptr);
    close(c->fd);
    unsent -= c->writer.bytes();
    connections.erase(key);
    std::erase(paused, key);
    count.fetch_sub(1);
  }
  if (served && closed) closed(key);
}

void ControlServer::Loop::ProcessDirty() {
  std::vector<Connection*> broken;
  {
    std::lock_guard<std::mutex> g(mu);
    for (uint64_t key : dirty) {
      Connection* c = Find(key);
      if (c == nullptr) continue;
      if (c->broken.empty()) FlushLocked(c);
      if (c->broken.empty()) SyncOutputLocked(c);
      else if (std::find(broken.begin(), broken.end(), c) == broken.end()) broken.push_back(c);
    }
    dirty.clear();
  }
  for (Connection* c : broken) {
    KVF_LOG_WARN("store control server on {}: closing the connection from {}: {}", address, c->peer, c->broken);
    Close(c);
  }
}

void ControlServer::Loop::PauseLocked(Connection* c) {
  c->paused = true;
  Watch(epoll_fd, c->fd, c->key, false, c->want_out);
  paused.push_back(c->key);
}

bool ControlServer::Loop::Throttle() {
  if (paused.empty()) return false;
  std::vector<Connection*> slowest;  // paused, while every connection's replies pass max_unsent
  std::vector<uint64_t> read_now;    // resumed with requests read before the pause
  {
    std::lock_guard<std::mutex> g(mu);
    std::erase_if(paused, [&](uint64_t key) {
      Connection* c = Find(key);
      if (BackloggedLocked(*c)) return false;
      c->paused = false;
      Watch(epoll_fd, c->fd, key, true, c->want_out);
      if (c->reader.buffered()) read_now.push_back(key);
      return true;
    });
  }
  for (uint64_t key : read_now)
    if (Connection* c = Find(key); c != nullptr && !c->paused) OnReadable(c);
  {
    std::lock_guard<std::mutex> g(mu);
    if (unsent <= max_unsent) return !read_now.empty();
    for (uint64_t key : paused) slowest.push_back(Find(key));
    std::sort(slowest.begin(), slowest.end(),
              [](const Connection* a, const Connection* b) { return a->writer.bytes() > b->writer.bytes(); });
    size_t left = unsent, n = 0;
    while (n < slowest.size() && left > max_unsent) left -= slowest[n++]->writer.bytes();
    slowest.resize(n);
  }
  for (Connection* c : slowest) {
    KVF_LOG_WARN("store control server on {}: closing the connection from {}: its client reads none of the {} "
                 "bytes of replies waiting for it, while the replies waiting for every client pass "
                 "KVF_STORE_MAX_UNSENT_BYTES ({})",
                 address, c->peer, c->writer.bytes(), max_unsent);
    Close(c);
  }
  return !read_now.empty();
}

void ControlServer::Loop::ExpireDeadlines() {
  const auto now = std::chrono::steady_clock::now();
  while (!deadlines.empty() && deadlines.front().first <= now) {
    Connection* c = Find(deadlines.front().second);
    deadlines.pop_front();
    if (c == nullptr || (c->state == Connection::State::kReady && !Unproven(*c))) continue;
    if (c->state != Connection::State::kDraining)
      KVF_LOG_WARN("store control server on {}: closing the connection from {}: it did not {} within {} ms "
                   "(KVF_HANDSHAKE_AUTH_TIMEOUT_MS)",
                   address, c->peer, token.empty() ? "send a request" : "authenticate", auth_timeout.count());
    Close(c);
  }
  if (accept_paused && accept_resume <= now) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenerKey;
    epoll_ctl(epoll_fd, EPOLL_CTL_MOD, listen_fd, &ev);
    accept_paused = false;
  }
}

}  // namespace kvfabric::store
