// The p2p handshake: every engine runs a small TCP server that answers
// get-segment, notify and probe requests. Peers open a segment by asking its
// owner directly (one round trip returns every rail's address and every
// registered buffer), so there is nothing else to run.
#pragma once

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "kvfabric/status.h"
#include "metadata/frame.h"
#include "metadata/handshake_session.h"

namespace kvfabric::metadata {

class HandshakeServer {
 public:
  // Answers one request; a non-OK status goes back to the client as an error.
  using Handler = ServerSession::Handler;
  struct Options {
    std::string host = "127.0.0.1";  // bound as given: never 0.0.0.0 unless asked
    uint16_t port = 0;               // 0 picks a free port
    int64_t timeout_ms = 5000;       // per request: a client slower than this is dropped
    size_t max_frame = 16 << 20;
    // Threads serving proven connections. Connections not yet proven wait
    // in one poll of the accept thread, up to 4x this (at least 256); beyond
    // that a newcomer displaces the oldest of them.
    size_t max_connections = 64;
    // A new connection must authenticate (without a token: send its first
    // request) within this time; the connection ends `lifetime_ms` after it
    // was accepted or after `max_requests` requests, whichever comes first.
    int64_t auth_timeout_ms = 2000;
    int64_t lifetime_ms = 30000;
    size_t max_requests = 1024;
    // When set, a connection must open with the challenge-response of
    // handshake_session.h; anything else is refused (PermissionDenied).
    std::string auth_token;
  };

  static Status Start(const Options& options, Handler handler, std::unique_ptr<HandshakeServer>* out);
  ~HandshakeServer();  // closes every connection and joins the threads
  HandshakeServer(const HandshakeServer&) = delete;
  HandshakeServer& operator=(const HandshakeServer&) = delete;

  uint16_t port() const { return port_; }
  // Clients refused so far: failed authentication, malformed frames,
  // requests the server does not serve.
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  // A connection served by a thread of its own: authenticated (with a
  // token), or with its first request read (without one).
  struct Connection {
    int fd = -1;
    Deadline end_of_life;
    std::unique_ptr<ServerSession> session;
    std::optional<Frame> first_request;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  // A connection not yet proven: the accept thread alone holds it, waits on
  // it with all others in one poll, and runs the challenge-response. It
  // costs a socket and the bytes received, no thread.
  struct Pending {
    int fd = -1;
    Deadline accepted, proof_by;
    std::unique_ptr<ServerSession> session;
    FrameReader reader;
    std::optional<Frame> first_request;
    bool ready = false;  // proven; waits for a thread
  };
  HandshakeServer() = default;
  void AcceptLoop();
  // Accepts what the listen socket holds; at the pending limit a newcomer
  // displaces the oldest pending connection that is not ready.
  void AcceptPending();
  // Reads what arrived on `p`; false when it is to be closed.
  bool AdvancePending(Pending* p);
  // Hands ready connections to threads while fewer than max_connections run.
  void StartReady();
  void Serve(Connection* c);
  // Sends `step` (a refusal is logged first); whether the connection stays open.
  bool Answer(int fd, const ServerSession::Step& step, Deadline deadline);
  // A frame that could not be read: a malformed one is logged and refused
  // (best effort: the connection closes either way).
  void DropUnreadable(int fd, const Status& read_error, Deadline deadline);
  void ReapLocked();

  Options options_;
  Handler handler_;
  size_t max_pending_ = 0;
  int listen_fd_ = -1;
  std::atomic<uint64_t> refused_{0};
  int stop_fd_ = -1;  // eventfd that wakes the accept loop
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::list<Pending> pending_;  // the accept thread's own, oldest first
  std::mutex mu_;
  std::list<Connection> connections_;
};

struct CallOptions {
  int64_t timeout_ms = 5000;
  size_t max_frame = 16 << 20;
  std::string auth_token;  // proves it by challenge-response first when set
};

// One request/reply exchange with the handshake server at "host:port".
// An error reply comes back as the Status the server sent.
Status HandshakeCall(const std::string& host_port, uint16_t type, std::string_view payload,
                     const CallOptions& options, std::string* reply);

}  // namespace kvfabric::metadata
