// DeadlineServer: cpp-httplib's server with a whole-request deadline, a
// byte budget per connection and a bound on the workers one client address
// holds. httplib 0.11 bounds each read (5 s), not a request, and serves
// from 8 threads: with those alone, a client sending one header byte every
// few seconds holds a thread for ever, and ten such sockets stop the server;
// clients that start slow requests again as each is cut would still hold
// every worker in turn, but for the per-client bound.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace kvfabric::metadata_server {

class DeadlineServer : public httplib::Server {
 public:
  struct Limits {
    // From the moment a worker takes the connection: its request must
    // arrive whole (headers and body) and its answer leave by then; else the
    // connection is closed unanswered.
    int64_t request_timeout_ms = 10000;
    // Bytes read from one connection at most (headers and body); past it the
    // request fails (httplib answers 400, or 413 for a declared length).
    size_t max_request_bytes = 16 << 20;
    // Connections served at once; more wait, unread, until a worker is free.
    size_t threads = 64;
    // Connections of one client address served at once; past it, a
    // connection is answered 503 and closed as soon as a worker takes it.
    size_t max_per_client = 32;
  };

  explicit DeadlineServer(const Limits& limits);

 private:
  // One request per connection (kvfabric's client opens one per call; an
  // idle kept-alive connection would hold a worker), read from a
  // DeadlineStream, then a lingering close: the peer gets the answer even
  // when it was refused before its body was read.
  bool process_and_close_socket(socket_t sock) override;
  // Counts a connection of client `ip` in (true), or refuses it: the
  // client holds max_per_client workers already.
  bool Enter(const std::string& ip);
  void Leave(const std::string& ip);
  // Reads and answers the connection's one request, then closes it.
  bool Serve(socket_t sock);

  const Limits limits_;
  std::mutex mu_;
  std::unordered_map<std::string, size_t> serving_;  // client address -> connections being served
};

}  // namespace kvfabric::metadata_server
