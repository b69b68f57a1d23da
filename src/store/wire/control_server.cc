#include "store/wire/control_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/crypto.h"
#include "common/log.h"
#include "common/text.h"
#include "metadata/auth.h"
#include "net/address.h"
#include "net/socket.h"
#include "store/wire/control_frame.h"

namespace kvfabric::store {

using namespace control;  // NOLINT: the wire's names, in this file only
using net::Deadline;

namespace {

constexpr uint64_t kListenerKey = 0;
constexpr uint64_t kWakeKey = 1;
constexpr int kAcceptsPerEvent = 64;
// How long accepting pauses when the process is out of file descriptors.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

}  // namespace

// The thread's state. Reply objects hold it too (shared), so a reply sent
// after Stop, or after the server is gone, finds `stopped` and does nothing.
//
// Locking: `mu` guards what other threads' replies touch: each connection's
// writer and flags, the map of connections (only the thread inserts and
// erases, under `mu`, so the thread reads it without), `dirty` and `stopped`.
// Everything else is the thread's alone. The handler is never called under
// `mu`, so a handler may reply inline.
struct ControlServer::Loop : std::enable_shared_from_this<ControlServer::Loop> {
  struct Connection {
    enum class State { kAwaitHello, kAwaitProof, kReady, kDraining };
    uint64_t key = 0;
    int fd = -1;
    std::string peer;  // "host:port" of the client, for the log
    // The thread's alone.
    State state = State::kReady;
    std::string client_nonce, server_nonce;
    FrameReader reader;
    bool want_out = false;  // EPOLLOUT armed
    bool paused = false;    // EPOLLIN off: its replies wait for its client to read them (Backlogged)
    bool served = false;    // a request reached the handler: Closed is called for it
    // Under `mu`.
    FrameWriter writer;
    bool closing = false;      // refused: nothing more is queued; write side shut once flushed
    std::string broken;        // why the thread must close it (a send failed, too much unsent)
  };

  struct ReplyOnce;
  ~Loop() { CloseAll(); }

  void Run();
  void Wake();
  // A reply from a handler: queued or written now, under `mu`. False when
  // dropped (the connection is gone or the server stopped).
  bool Send(uint64_t key, uint64_t id, Status status, std::string payload);
  Reply MakeReply(uint64_t key, uint64_t id);
  // Closes the listener and every connection and the thread's descriptors.
  void CloseAll();

  Connection* Find(uint64_t key) {
    auto it = connections.find(key);
    return it == connections.end() ? nullptr : it->second.get();
  }
  void Accept();
  // Whether a connection has yet to authenticate (with a token) or to send
  // its first request (without one).
  bool Unproven(const Connection& c) const;
  // At the connection limit: closes the oldest unproven connection (true),
  // or finds none (false: the new one is refused).
  bool MakeRoom();
  void Add(int fd, const net::SocketAddress& peer);
  void OnReadable(Connection* c);
  Status CheckHeader(const Connection& c, uint16_t type, uint32_t length) const;
  // One whole frame; false when the connection stops reading.
  bool OnFrame(Connection* c, Frame&& f);
  // Sends `status` as an error about the whole connection, then closes it
  // once the client has read it (or the drain time passed).
  void Refuse(Connection* c, const Status& status);
  void Close(Connection* c);
  // Under `mu`: queues one frame. Another thread writes it at once when
  // nothing is queued before it; the thread sends its round's frames
  // together, after the round (ProcessDirty).
  void EnqueueLocked(Connection* c, uint16_t type, uint64_t id, std::string payload);
  void MarkDirtyLocked(uint64_t key);
  // Under `mu`: EPOLLOUT armed exactly while output waits; the write side
  // shut once a refused connection's error is out.
  void SyncOutputLocked(Connection* c);
  // Under `mu`: sends what the socket takes, keeping `unsent` in step.
  void FlushLocked(Connection* c);
  // Under `mu`: whether the connection's requests must wait (its reading
  // paused) for its client to read replies: past kPauseUnsentBytes of its
  // own, or any while every connection's together pass max_unsent.
  bool BackloggedLocked(const Connection& c) const;
  // Under `mu`: stops reading a backlogged connection until Throttle
  // resumes it.
  void PauseLocked(Connection* c);
  // Resumes reading the paused connections no longer backlogged (true when
  // it read requests left in their readers), then, while the replies
  // waiting pass max_unsent, closes the paused connections holding the
  // most until they do not.
  bool Throttle();
  void ProcessDirty();
  void ExpireDeadlines();
  int TimeoutMs() const;

  // Set by Start.
  std::string address;
  std::string token;
  size_t max_frame = 0;
  size_t max_connections = 0;
  size_t max_unsent = 0;
  std::chrono::milliseconds auth_timeout{0};
  Handler handler;
  Closed closed;
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;

  std::mutex mu;
  bool stopped = false;
  std::thread::id thread_id;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections;
  std::vector<uint64_t> dirty;  // connections whose output the thread must look at
  size_t unsent = 0;            // replies queued on every connection, in bytes
  std::atomic<bool> stopping{false};
  std::atomic<size_t> count{0};

  // The thread's alone.
  uint64_t next_key = 2;
  std::vector<uint64_t> paused;  // connections not read for now (Throttle)
  // Connections that must authenticate, or finish draining, by a time: all
  // with the same delay, so in order.
  std::deque<std::pair<Deadline, uint64_t>> deadlines;
  size_t refused = 0;  // connections closed at the limit in this burst
  bool accept_paused = false;
  Deadline accept_resume;
};

// One request's reply: the first call counts, and dropping every copy
// uncalled answers Internal.
struct ControlServer::Loop::ReplyOnce {
  std::shared_ptr<Loop> loop;
  uint64_t key = 0, id = 0;
  std::atomic<bool> sent{false};
  ~ReplyOnce() {
    if (sent.load()) return;
    if (loop->Send(key, id, Status::Internal("the store node's handler dropped the request without a reply"), {}))
      KVF_LOG_WARN("store control server on {}: the handler dropped request {} without replying", loop->address, id);
  }
};

ControlServer::Reply ControlServer::Loop::MakeReply(uint64_t key, uint64_t id) {
  auto once = std::make_shared<ReplyOnce>();
  once->loop = shared_from_this();
  once->key = key;
  once->id = id;
  return [once](Status status, std::string payload) {
    if (!once->sent.exchange(true)) once->loop->Send(once->key, once->id, std::move(status), std::move(payload));
  };
}

bool ControlServer::Loop::Send(uint64_t key, uint64_t id, Status status, std::string payload) {
  if (status.ok() && payload.size() > max_frame) {
    KVF_LOG_WARN("store control server on {}: a reply of {} bytes exceeds KVF_HANDSHAKE_MAX_FRAME ({}); sent as "
                 "an error instead",
                 address, payload.size(), max_frame);
    status = Status::InvalidArgument(text::Format(
        "the store node's reply of {} bytes exceeds KVF_HANDSHAKE_MAX_FRAME ({})", payload.size(), max_frame));
  }
  const uint16_t type = status.ok() ? kReply : kError;
  if (!status.ok()) payload = ErrorPayload(status);
  std::lock_guard<std::mutex> g(mu);
  Connection* c = stopped ? nullptr : Find(key);
  if (c == nullptr || c->closing) return false;
  EnqueueLocked(c, type, id, std::move(payload));
  return true;
}

void ControlServer::Loop::FlushLocked(Connection* c) {
  const size_t before = c->writer.bytes();
  Status s = c->writer.Flush(c->fd);
  unsent = unsent - before + c->writer.bytes();
  if (!s.ok() && c->broken.empty()) c->broken = s.message();
}

bool ControlServer::Loop::BackloggedLocked(const Connection& c) const {
  const size_t mine = c.writer.bytes();
  return mine > kPauseUnsentBytes || (mine > 0 && unsent > max_unsent);
}

void ControlServer::Loop::EnqueueLocked(Connection* c, uint16_t type, uint64_t id, std::string payload) {
  if (!c->broken.empty()) return;
  const bool first = c->writer.empty();
  const size_t before = c->writer.bytes();
  c->writer.Push(type, id, std::move(payload));
  unsent = unsent - before + c->writer.bytes();
  if (c->writer.bytes() > kMaxUnsentBytes) {
    c->broken = text::Format("{} bytes of replies unsent (the client reads too slowly)", c->writer.bytes());
    MarkDirtyLocked(c->key);
    return;
  }
  if (!first) return;  // the thread knows output waits: it is dirty, or EPOLLOUT is armed
  // Another thread writes at once rather than wake the thread for it; the
  // thread itself sends all its round's output together, after the round.
  if (std::this_thread::get_id() != thread_id) {
    FlushLocked(c);
    if (c->broken.empty() && c->writer.empty()) return;
  }
  MarkDirtyLocked(c->key);
}

void ControlServer::Loop::MarkDirtyLocked(uint64_t key) {
  dirty.push_back(key);
  // The thread looks at `dirty` after every wait; only another thread wakes it.
  if (dirty.size() == 1 && std::this_thread::get_id() != thread_id) Wake();
}

void ControlServer::Loop::Wake() { control::Wake(wake_fd); }

void ControlServer::Loop::SyncOutputLocked(Connection* c) {
  if (!c->broken.empty()) return;
  const bool want = !c->writer.empty();
  if (want != c->want_out) Watch(epoll_fd, c->fd, c->key, !c->paused, want);
  c->want_out = want;
  if (c->closing && !want) shutdown(c->fd, SHUT_WR);
}

Status ControlServer::Start(const std::string& listen, const Settings& settings, Handler handler,
                            std::unique_ptr<ControlServer>* out, Closed closed) {
  std::string host;
  uint16_t port = 0;
  KVF_RETURN_IF_ERROR(net::ParseHostPort(listen, &host, &port).Annotate("store control server"));
  net::SocketAddress sa;
  KVF_RETURN_IF_ERROR(net::ResolveHost(host, &sa).Annotate("store control server"));
  sa.set_port(port);

  auto loop = std::make_shared<Loop>();
  loop->token = settings.auth_token;
  loop->max_frame = static_cast<size_t>(settings.handshake_max_frame);
  loop->max_connections = static_cast<size_t>(settings.store_max_connections);
  loop->max_unsent = static_cast<size_t>(settings.store_max_unsent_bytes);
  loop->auth_timeout = std::chrono::milliseconds(settings.handshake_auth_timeout_ms);
  loop->handler = std::move(handler);
  loop->closed = std::move(closed);
  KVF_RETURN_IF_ERROR(net::OpenTcpSocket(sa.family(), listen, &loop->listen_fd).Annotate("store control server"));
  int one = 1;
  setsockopt(loop->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(loop->listen_fd, sa.get(), sa.length) != 0 || ::listen(loop->listen_fd, SOMAXCONN) != 0)
    return Status::NetworkError("store control server cannot listen on " + listen + ": " + std::strerror(errno) +
                                " (choose another port or a local address, KVF_STORE_LISTEN)");
  socklen_t len = sizeof(sa.storage);
  getsockname(loop->listen_fd, sa.get(), &len);
  loop->address = net::FormatHostPort(sa.ip(), sa.port());
  KVF_RETURN_IF_ERROR(control::OpenEpoll(&loop->epoll_fd, &loop->wake_fd, kWakeKey).Annotate("store control server"));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenerKey;
  epoll_ctl(loop->epoll_fd, EPOLL_CTL_ADD, loop->listen_fd, &ev);

  std::unique_ptr<ControlServer> server(new ControlServer());
  server->address_ = loop->address;
  server->loop_ = loop;
  server->thread_ = std::thread([raw = loop.get()] { raw->Run(); });
  *out = std::move(server);
  return Status::OK();
}

ControlServer::~ControlServer() { Stop(); }

void ControlServer::Stop() {
  if (!loop_) return;
  {
    std::lock_guard<std::mutex> g(loop_->mu);
    loop_->stopped = true;
  }
  loop_->stopping.store(true);
  loop_->Wake();
  if (thread_.joinable()) thread_.join();
  loop_->CloseAll();
  // Outside `mu`: destroying the handler may destroy Reply objects, which
  // take `mu` to find the server stopped.
  Handler gone = std::move(loop_->handler);
  loop_->handler = nullptr;
  loop_->closed = nullptr;
}

size_t ControlServer::connection_count() const { return loop_->count.load(); }

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
