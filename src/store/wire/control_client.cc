#include "store/wire/control_client.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/crypto.h"
#include "common/log.h"
#include "common/text.h"
#include "metadata/auth.h"
#include "net/address.h"
#include "store/wire/control_frame.h"

namespace kvfabric::store {

using namespace control;  // NOLINT: the wire's names, in this file only
using net::Deadline;

// The loop's state. Call and Disconnect hand it operations through `inbox`
// (under `mu`); everything else belongs to whichever thread holds `run_mu`:
// the client's thread, between its waits, or a caller that found it
// waiting and sends its own requests on connections already open (the fast
// path: no wake-up of the client's thread on the way of a request, a tenth
// of an exists batch's time on this 2-vCPU host).
struct ControlClient::Loop {
  struct Connection {
    enum class State { kIdle, kConnecting, kAwaitChallenge, kAwaitWelcome, kReady };
    struct Pending {
      Done done;
      Deadline deadline;
    };
    std::string address;  // as the callers wrote it
    int fd = -1;
    State state = State::kIdle;
    Deadline connect_by;
    std::string client_nonce;
    FrameReader reader;
    FrameWriter writer;
    bool want_out = false;  // EPOLLOUT armed
    bool touched = false;   // output queued in this round: flush after the inbox
    std::unordered_map<uint64_t, Pending> pending;  // sent or held, by request id
    std::vector<std::pair<uint64_t, std::string>> held;  // requests until the connection is ready
  };
  struct Op {
    std::string address;
    std::string payload;
    Deadline deadline;
    Done done;
    bool disconnect = false;
  };

  explicit Loop(const Settings& settings)
      : token(settings.auth_token),
        max_frame(static_cast<size_t>(settings.handshake_max_frame)),
        connect_timeout(settings.handshake_timeout_ms) {}

  void Post(Op op);
  // Posts `ops` together: sent at once by the calling thread when the loop
  // is free and their connections are ready, else handed to the client's
  // thread with at most one wake.
  void PostAll(std::vector<Op> ops);
  void Run();
  // Starts what the inbox holds; true once the client is closing.
  bool TakeInbox();
  // The fast path, run_mu held by a caller: starts and sends the inbox's
  // operations when each goes to a ready connection (a caller never
  // resolves, connects or blocks). Returns whether the client's thread must
  // wake: operations left to it, or a call's deadline before its wait ends.
  bool SendFromCaller();
  // Sends the output the started operations queued.
  void FlushTouched();
  void Start(Op& op);
  void Connect(Connection* c);
  void OnConnected(Connection* c);
  void OnEvent(Connection* c, uint32_t events);
  Status CheckHeader(const Connection& c, uint16_t type, uint32_t length) const;
  bool OnFrame(Connection* c, Frame&& f);
  void ReleaseHeld(Connection* c);
  // Sends what the socket takes; EPOLLOUT armed exactly while output waits
  // (or the connect is in progress).
  void Flush(Connection* c);
  // Ends call `id` with `status`, when it is still pending.
  void Finish(Connection* c, uint64_t id, Status status, std::string reply);
  // Closes the connection and ends every call pending on it with `status`.
  void Fail(Connection* c, const Status& status);
  void ExpireTimers();

  const std::string token;
  const size_t max_frame;
  const std::chrono::milliseconds connect_timeout;
  int epoll_fd = -1, wake_fd = -1;
  Status unusable;  // no epoll instance (out of descriptors): no thread, every call fails
  std::thread thread;

  std::mutex mu;
  std::vector<Op> inbox;
  mutable std::mutex losses_mu;
  std::unordered_map<std::string, uint64_t> losses;  // connections ended, by address (Losses)
  bool closing = false;   // the destructor runs
  bool finished = false;  // the thread took its last operation

  std::mutex run_mu;
  bool posted_by_thread = false;  // a Done called Call or Disconnect: take the inbox again at once
  Deadline armed_until = Deadline::max();  // when the client thread's current wait ends

  std::unordered_map<std::string, std::unique_ptr<Connection>> connections;
  // Call deadlines (id > 0) and connect deadlines (id 0), earliest first.
  std::set<std::tuple<Deadline, uint64_t, Connection*>> timers;
  uint64_t next_id = 1;
  std::vector<Connection*> touched;
};

namespace {
// The loop whose state the current thread holds (run_mu), if any: a Done
// that calls Call or Disconnect queues it for the end of the round.
thread_local const void* running_loop = nullptr;
// The client's thread waits at most this long, so a caller's call with a
// later deadline need not wake it (its timer is seen in time).
constexpr auto kLongestWait = std::chrono::milliseconds(50);
}  // namespace

ControlClient::ControlClient(const Settings& settings) : loop_(std::make_unique<Loop>(settings)) {
  loop_->unusable = OpenEpoll(&loop_->epoll_fd, &loop_->wake_fd, 0).Annotate("store control client");
  if (!loop_->unusable.ok()) {
    KVF_LOG_ERROR("{}", loop_->unusable.ToString());
    return;
  }
  loop_->thread = std::thread([raw = loop_.get()] { raw->Run(); });
}

ControlClient::~ControlClient() {
  {
    std::lock_guard<std::mutex> g(loop_->mu);
    loop_->closing = true;
  }
  if (loop_->thread.joinable()) {
    Wake(loop_->wake_fd);
    loop_->thread.join();
  }
  for (int fd : {loop_->epoll_fd, loop_->wake_fd})
    if (fd >= 0) close(fd);
}

void ControlClient::Call(const std::string& address, std::string payload, Deadline deadline, Done done) {
  loop_->Post({address, std::move(payload), deadline, std::move(done)});
}

void ControlClient::CallAll(std::vector<Request> calls, Deadline deadline) {
  std::vector<Loop::Op> ops;
  ops.reserve(calls.size());
  for (Request& r : calls) ops.push_back({std::move(r.address), std::move(r.payload), deadline, std::move(r.done)});
  loop_->PostAll(std::move(ops));
}

Status ControlClient::CallSync(const std::string& address, std::string payload, Deadline deadline,
                               std::string* reply) {
  if (std::this_thread::get_id() == loop_->thread.get_id() || running_loop == loop_.get())
    return Status::InvalidArgument("ControlClient::CallSync from a Done callback would wait for itself; use Call");
  std::promise<std::pair<Status, std::string>> result;
  auto ended = result.get_future();
  Call(address, std::move(payload), deadline, [&result](Status s, std::string r) {
    result.set_value({std::move(s), std::move(r)});
  });
  auto [status, text] = ended.get();
  if (status.ok() && reply != nullptr) *reply = std::move(text);
  return status;
}

void ControlClient::Disconnect(const std::string& address) {
  Loop::Op op;
  op.address = address;
  op.disconnect = true;
  loop_->Post(std::move(op));
}

void ControlClient::Loop::Post(Op op) {
  std::vector<Op> one;
  one.push_back(std::move(op));
  PostAll(std::move(one));
}

void ControlClient::Loop::PostAll(std::vector<Op> ops) {
  if (ops.empty()) return;
  std::unique_lock<std::mutex> g(mu);
  if (finished || !unusable.ok()) {  // calls racing the destructor, or no thread: end them here
    g.unlock();
    const Status why = unusable.ok() ? Status::Closed("the store control client was destroyed") : unusable;
    for (Op& op : ops)
      if (op.done) op.done(why, {});
    return;
  }
  const bool was_empty = inbox.empty();
  for (Op& op : ops) inbox.push_back(std::move(op));
  g.unlock();
  if (running_loop == this) {  // a Done, on the thread running the loop: taken at the end of its round
    posted_by_thread = true;
    return;
  }
  if (run_mu.try_lock()) {
    const void* outer = running_loop;  // a Done of another client's loop may be calling
    running_loop = this;
    const bool wake = SendFromCaller();
    running_loop = outer;
    run_mu.unlock();
    if (wake) Wake(wake_fd);
    return;
  }
  // The client's thread is running: it takes the inbox after its round;
  // it is woken only when it might be waiting already.
  if (was_empty) Wake(wake_fd);
}

bool ControlClient::Loop::SendFromCaller() {
  std::vector<Op> ops;
  {
    std::lock_guard<std::mutex> g(mu);
    if (closing) return true;
    for (const Op& op : inbox) {
      auto it = connections.find(op.address);
      if (op.disconnect || it == connections.end() || it->second->state != Connection::State::kReady)
        return true;
    }
    ops.swap(inbox);
  }
  const Deadline before = timers.empty() ? Deadline::max() : std::get<0>(*timers.begin());
  for (Op& op : ops) Start(op);
  FlushTouched();
  const Deadline earliest = timers.empty() ? Deadline::max() : std::get<0>(*timers.begin());
  // A Done that ran here (a call failed at once) and posted more; or a
  // deadline the client's thread would notice too late.
  return posted_by_thread || (earliest < before && earliest < armed_until);
}

void ControlClient::Loop::FlushTouched() {
  for (Connection* c : touched) {
    c->touched = false;
    Flush(c);
  }
  touched.clear();
}

void ControlClient::Loop::Run() {
  epoll_event events[64];
  bool closed = false;
  std::unique_lock<std::mutex> run(run_mu);
  running_loop = this;
  while (!closed) {
    const Deadline timer = timers.empty() ? Deadline::max() : std::get<0>(*timers.begin());
    const Deadline next = posted_by_thread ? std::chrono::steady_clock::now()
                                           : std::min(timer, std::chrono::steady_clock::now() + kLongestWait);
    armed_until = next;
    posted_by_thread = false;
    running_loop = nullptr;
    run.unlock();
    const int n = epoll_wait(epoll_fd, events, static_cast<int>(std::size(events)), TimeoutMs(next));
    run.lock();
    running_loop = this;
    armed_until = Deadline::max();
    for (int i = 0; i < n; ++i) {
      auto* c = static_cast<Connection*>(events[i].data.ptr);
      if (c == nullptr) DrainWake(wake_fd);
      else OnEvent(c, events[i].events);
    }
    closed = TakeInbox();
    FlushTouched();
    ExpireTimers();
  }
  const Status gone = Status::Closed("the store control client was destroyed");
  for (auto& [address, c] : connections) Fail(c.get(), gone);
  for (;;) {  // a Done may still Call
    std::vector<Op> ops;
    {
      std::lock_guard<std::mutex> g(mu);
      ops.swap(inbox);
      finished = ops.empty();
    }
    if (finished) break;
    for (Op& op : ops)
      if (op.done) op.done(gone, {});
  }
}

bool ControlClient::Loop::TakeInbox() {
  std::vector<Op> ops;
  {
    std::lock_guard<std::mutex> g(mu);
    if (closing) return true;
    ops.swap(inbox);
  }
  for (Op& op : ops) Start(op);
  return false;
}

void ControlClient::Loop::Start(Op& op) {
  auto it = connections.find(op.address);
  if (op.disconnect) {
    if (it != connections.end())
      Fail(it->second.get(), Status::NetworkError("connection to the store node at " + op.address +
                                                  " dropped by Disconnect"));
    return;
  }
  if (op.payload.size() > max_frame) {
    op.done(Status::InvalidArgument(text::Format("a store control request of {} bytes exceeds "
                                                 "KVF_HANDSHAKE_MAX_FRAME ({})",
                                                 op.payload.size(), max_frame)),
            {});
    return;
  }
  if (it == connections.end()) {
    it = connections.emplace(op.address, std::make_unique<Connection>()).first;
    it->second->address = op.address;
  }
  Connection* c = it->second.get();
  const uint64_t id = next_id++;
  c->pending.emplace(id, Connection::Pending{std::move(op.done), op.deadline});
  timers.emplace(op.deadline, id, c);
  if (c->state == Connection::State::kIdle) {
    c->held.emplace_back(id, std::move(op.payload));
    Connect(c);  // on failure, ends this call too
    return;
  }
  if (c->state != Connection::State::kReady) {
    c->held.emplace_back(id, std::move(op.payload));
    return;
  }
  c->writer.Push(kRequest, id, std::move(op.payload));
  if (!c->touched) {
    c->touched = true;
    touched.push_back(c);
  }
}

void ControlClient::Loop::Connect(Connection* c) {
  c->reader.Reset();
  c->writer.Reset();
  const std::string where = "store control connection to " + c->address;
  std::string host;
  uint16_t port = 0;
  net::SocketAddress sa;
  Status s = net::ParseHostPort(c->address, &host, &port);
  if (s.ok()) s = net::ResolveHost(host, &sa);
  if (s.ok()) s = net::OpenTcpSocket(sa.family(), c->address, &c->fd);
  if (!s.ok()) {
    Fail(c, s.Annotate(where));
    return;
  }
  sa.set_port(port);
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const bool now = connect(c->fd, sa.get(), sa.length) == 0;
  if (!now && errno != EINPROGRESS) {
    Fail(c, Status::NetworkError("cannot connect to the store node at " + c->address + ": " + std::strerror(errno) +
                                 " (is the node running and listening there?)"));
    return;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT;
  ev.data.ptr = c;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, c->fd, &ev);
  c->want_out = true;
  c->state = Connection::State::kConnecting;
  c->connect_by = std::chrono::steady_clock::now() + connect_timeout;
  timers.emplace(c->connect_by, 0, c);
  if (now) OnConnected(c);
}

void ControlClient::Loop::OnConnected(Connection* c) {
  if (token.empty()) {
    c->state = Connection::State::kReady;
    ReleaseHeld(c);
  } else {
    c->client_nonce = metadata::auth::NewNonce();
    c->writer.Push(kHello, 0, c->client_nonce);
    c->state = Connection::State::kAwaitChallenge;
  }
  Flush(c);
}

void ControlClient::Loop::ReleaseHeld(Connection* c) {
  for (auto& [id, payload] : c->held)
    if (c->pending.count(id) != 0) c->writer.Push(kRequest, id, std::move(payload));  // else timed out already
  c->held.clear();
}

void ControlClient::Loop::OnEvent(Connection* c, uint32_t events) {
  if (c->fd < 0) return;  // failed earlier in this round
  if (c->state == Connection::State::kConnecting) {
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0)
      Fail(c, Status::NetworkError("cannot connect to the store node at " + c->address + ": " + std::strerror(err) +
                                   " (is the node running and listening there?)"));
    else if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
      OnConnected(c);
    return;
  }
  if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
    Status s = c->reader.Read(
        c->fd, [&](uint16_t type, uint32_t length) { return CheckHeader(*c, type, length); },
        [&](Frame&& f) { return OnFrame(c, std::move(f)); });
    if (!s.ok() && c->fd >= 0) {
      if (s.code() == Status::Code::kNetworkError)
        s = Status::NetworkError(text::Format("connection to the store node at {} broke: {} (the node stopped, or "
                                              "is at its KVF_STORE_MAX_CONNECTIONS)",
                                              c->address, s.message()));
      else
        s = s.Annotate("store node at " + c->address);
      Fail(c, s);
    }
  }
  if (c->fd >= 0 && (events & EPOLLOUT)) Flush(c);
}

Status ControlClient::Loop::CheckHeader(const Connection& c, uint16_t type, uint32_t length) const {
  using State = Connection::State;
  const bool ready = c.state == State::kReady;
  const bool expected = type == kError || (ready && type == kReply) ||
                        (c.state == State::kAwaitChallenge && type == kChallenge) ||
                        (c.state == State::kAwaitWelcome && type == kWelcome);
  if (!expected) return Status::ProtocolError(text::Format("unexpected frame type {}", type));
  return CheckLength(length, ready ? max_frame : kPreAuthMaxPayload);
}

bool ControlClient::Loop::OnFrame(Connection* c, Frame&& f) {
  using State = Connection::State;
  if (f.type == kError && f.id == 0) {  // the node refused the connection
    Fail(c, StatusFromErrorPayload(f.payload).Annotate("store node at " + c->address));
    return false;
  }
  switch (f.type) {
    case kReply:
      Finish(c, f.id, Status::OK(), std::move(f.payload));  // a reply after its Timeout finds nothing
      return true;
    case kError:
      Finish(c, f.id, StatusFromErrorPayload(f.payload), {});
      return true;
    case kChallenge: {
      const size_t n = metadata::auth::kNonceSize;
      const std::string_view nonce = std::string_view(f.payload).substr(0, n);
      if (f.payload.size() != 2 * n ||
          !crypto::SameBytes(std::string_view(f.payload).substr(n),
                             metadata::auth::ServerProof(token, c->client_nonce, nonce))) {
        Fail(c, Status::PermissionDenied("the store node at " + c->address +
                                         " could not prove it holds this process's auth token: KVF_AUTH_TOKEN "
                                         "differs between the two processes"));
        return false;
      }
      c->writer.Push(kProof, 0, metadata::auth::ClientProof(token, c->client_nonce, nonce));
      c->state = State::kAwaitWelcome;
      Flush(c);
      return c->fd >= 0;
    }
    case kWelcome:
      c->state = State::kReady;
      ReleaseHeld(c);
      Flush(c);
      return c->fd >= 0;
  }
  return true;
}

void ControlClient::Loop::Flush(Connection* c) {
  if (c->fd < 0) return;
  Status s = c->writer.Flush(c->fd);
  if (!s.ok()) {
    Fail(c, Status::NetworkError(text::Format("connection to the store node at {} broke: {}", c->address,
                                              s.message())));
    return;
  }
  const bool want = !c->writer.empty() || c->state == Connection::State::kConnecting;
  if (want != c->want_out) WatchOutput(epoll_fd, c->fd, reinterpret_cast<uintptr_t>(c), want);
  c->want_out = want;
}

void ControlClient::Loop::Finish(Connection* c, uint64_t id, Status status, std::string reply) {
  auto it = c->pending.find(id);
  if (it == c->pending.end()) return;
  Done done = std::move(it->second.done);
  timers.erase({it->second.deadline, id, c});
  c->pending.erase(it);
  done(std::move(status), std::move(reply));
}

uint64_t ControlClient::Losses(const std::string& address) const {
  std::lock_guard<std::mutex> g(loop_->losses_mu);
  auto it = loop_->losses.find(address);
  return it == loop_->losses.end() ? 0 : it->second;
}

void ControlClient::Loop::Fail(Connection* c, const Status& status) {
  {
    std::lock_guard<std::mutex> g(losses_mu);
    ++losses[c->address];
  }
  if (c->fd >= 0) {
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, nullptr);
    close(c->fd);
    c->fd = -1;
  }
  c->state = Connection::State::kIdle;
  c->want_out = false;
  c->writer.Reset();
  c->held.clear();
  auto pending = std::move(c->pending);
  c->pending.clear();
  for (auto& [id, p] : pending) {
    timers.erase({p.deadline, id, c});
    p.done(status, {});
  }
}

void ControlClient::Loop::ExpireTimers() {
  const auto now = std::chrono::steady_clock::now();
  while (!timers.empty() && std::get<0>(*timers.begin()) <= now) {
    const auto [deadline, id, c] = *timers.begin();
    timers.erase(timers.begin());
    const bool ready = c->state == Connection::State::kReady;
    if (id == 0) {  // the connect deadline of an attempt, maybe an earlier one
      if (!ready && c->state != Connection::State::kIdle && c->connect_by <= now)
        Fail(c, Status::NetworkError(text::Format("could not connect to and authenticate with the store node at {} "
                                                  "within {} ms (KVF_HANDSHAKE_TIMEOUT_MS)",
                                                  c->address, connect_timeout.count())));
      continue;
    }
    auto it = c->pending.find(id);
    if (it == c->pending.end()) continue;
    Done done = std::move(it->second.done);
    c->pending.erase(it);
    done(Status::Timeout("no reply from the store node at " + c->address + " before the call's deadline" +
                         (ready ? "" : " (the connection was still being opened)")),
         {});
  }
}

}  // namespace kvfabric::store
