// DeadlineServer: cpp-httplib's server with a whole-request deadline and a
// byte budget per connection. httplib 0.11 bounds each read (5 s), not a
// request, and serves from 8 threads: a client sending one header byte
// every few seconds holds a thread for ever, and ten such sockets stopped
// kvfabric-metadata-server (issue 12, item 13).
#pragma once

#include <httplib.h>

#include <cstddef>
#include <cstdint>

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
  };

  explicit DeadlineServer(const Limits& limits);

 private:
  // One request per connection (kvfabric's client opens one per call; an
  // idle kept-alive connection would hold a worker), read from a
  // DeadlineStream, then a lingering close: the peer gets the answer even
  // when it was refused before its body was read.
  bool process_and_close_socket(socket_t sock) override;

  const Limits limits_;
};

}  // namespace kvfabric::metadata_server
