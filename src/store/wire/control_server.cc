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
#include "store/wire/control_server_loop.h"

namespace kvfabric::store {

using namespace control;  // NOLINT: the wire's names, in this file only
using net::Deadline;

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

}  // namespace kvfabric::store
