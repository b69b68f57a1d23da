// ControlServer::Loop: the state of a control server's thread, shared by
// control_server.cc (the server's life and its replies) and
// control_server_loop.cc (the thread: connections, frames, authentication,
// back-pressure). Private to those two files.
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/log.h"
#include "net/address.h"
#include "net/socket.h"
#include "store/wire/control_frame.h"
#include "store/wire/control_server.h"

namespace kvfabric::store {

inline constexpr uint64_t kListenerKey = 0;
inline constexpr uint64_t kWakeKey = 1;
inline constexpr int kAcceptsPerEvent = 64;
// How long accepting pauses when the process is out of file descriptors.
inline constexpr auto kAcceptPause = std::chrono::milliseconds(100);


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
    control::FrameReader reader;
    bool want_out = false;  // EPOLLOUT armed
    bool paused = false;    // EPOLLIN off: its replies wait for its client to read them (Backlogged)
    bool served = false;    // a request reached the handler: Closed is called for it
    // Under `mu`.
    control::FrameWriter writer;
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
  bool OnFrame(Connection* c, control::Frame&& f);
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
  std::deque<std::pair<net::Deadline, uint64_t>> deadlines;
  size_t refused = 0;  // connections closed at the limit in this burst
  bool accept_paused = false;
  net::Deadline accept_resume;
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


}  // namespace kvfabric::store
