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
#include <string>
#include <string_view>
#include <thread>

#include "kvfabric/status.h"
#include "metadata/frame.h"

namespace kvfabric::metadata {

class HandshakeServer {
 public:
  // Answers one request; a non-OK status goes back to the client as an error.
  using Handler = std::function<Status(uint16_t type, const std::string& payload, std::string* reply)>;
  struct Options {
    std::string host = "127.0.0.1";  // bound as given: never 0.0.0.0 unless asked
    uint16_t port = 0;               // 0 picks a free port
    int64_t timeout_ms = 5000;       // per request: a client slower than this is dropped
    size_t max_frame = 16 << 20;
    size_t max_connections = 64;
    // When set, a connection must open with a kHello frame carrying it;
    // anything else is refused (PermissionDenied) and the connection closed.
    std::string auth_token;
  };

  static Status Start(const Options& options, Handler handler, std::unique_ptr<HandshakeServer>* out);
  ~HandshakeServer();  // closes every connection and joins the threads
  HandshakeServer(const HandshakeServer&) = delete;
  HandshakeServer& operator=(const HandshakeServer&) = delete;

  uint16_t port() const { return port_; }

 private:
  struct Connection {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  HandshakeServer() = default;
  void AcceptLoop();
  void Serve(Connection* c);
  void ReapLocked();

  Options options_;
  Handler handler_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // eventfd that wakes the accept loop
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::list<Connection> connections_;
};

struct CallOptions {
  int64_t timeout_ms = 5000;
  size_t max_frame = 16 << 20;
  std::string auth_token;  // sent in a kHello frame first when set
};

// One request/reply exchange with the handshake server at "host:port".
// An error reply comes back as the Status the server sent.
Status HandshakeCall(const std::string& host_port, uint16_t type, std::string_view payload,
                     const CallOptions& options, std::string* reply);

}  // namespace kvfabric::metadata
