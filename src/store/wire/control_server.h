// The node's side of the store's control channel: small requests (lookup,
// exists, put, remove, stats) from every client process, each on one
// persistent TCP connection that carries many requests at once, all served
// by one thread waiting on every connection with epoll. No thread and no
// connection per request. The wire format is in control_frame.h; payloads
// are opaque bytes here (the store's message codec reads them).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "kvfabric/settings.h"
#include "kvfabric/status.h"

namespace kvfabric::store {

class ControlServer {
 public:
  // Sends the reply to one request, from any thread, at any time; only the
  // first call of a Reply (and its copies) counts. OK with `payload`: the
  // client's Done gets OK and the payload. A non-OK status travels as an
  // error reply and reaches the client's Done as that Status (same code,
  // same message); the payload is then ignored. A payload over
  // KVF_HANDSHAKE_MAX_FRAME goes back as InvalidArgument instead. When the
  // request's connection is gone, or the server stopped, the reply is
  // dropped. A Reply destroyed without having been called answers Internal
  // ("dropped without a reply") so the client does not wait for its deadline.
  // It never blocks on the network: what the socket does not take at once is
  // queued for the server's thread. A connection with over 1 MiB of replies
  // queued is not read until its client has read them down; one whose
  // queued replies pass 64 MiB is closed (its client reads too slowly), and
  // so are the connections, most bytes first, whose client reads none while
  // every connection's together pass store_max_unsent_bytes.
  using Reply = std::function<void(Status status, std::string payload)>;
  // Called on the server's thread for every request, in the order each
  // connection sent them, never for a connection that has not authenticated,
  // with the id of the connection that carried it (unique for the server's
  // life; never 0). Must not block: a handler with slow work hands `reply`
  // to another thread. Must not call Stop or destroy the server.
  using Handler = std::function<void(uint64_t connection, std::string payload, Reply reply)>;
  // Called on the server's thread when a connection that carried at least
  // one request is closed: its client closed it, died or broke it, or the
  // server gave up on it. Not for the connections Stop closes. Must not
  // block, call Stop or destroy the server.
  using Closed = std::function<void(uint64_t connection)>;

  // Binds `listen` ("host:port" or "[v6addr]:port"; port 0 picks a free one)
  // and starts the thread. Uses from `settings`: auth_token (when set, every
  // connection must prove it holds the same token before its first request
  // reaches the handler), handshake_max_frame (largest request and reply),
  // store_max_connections (past it, the oldest connection that has not
  // authenticated, or without a token sent a request, makes room; with
  // none, a new connection is closed at once),
  // store_max_unsent_bytes (replies queued for every connection together),
  // handshake_auth_timeout_ms (a connection that has not authenticated, or
  // without a token sent its first request, by then is closed). InvalidArgument for an address that does not parse,
  // NetworkError when it cannot be bound.
  static Status Start(const std::string& listen, const Settings& settings, Handler handler,
                      std::unique_ptr<ControlServer>* out, Closed closed = nullptr);
  ~ControlServer();  // Stop()
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Closes the listener and every connection (their clients' pending calls
  // fail with NetworkError); returns once the thread ended and no Handler
  // call is running. Reply objects still held elsewhere become no-ops.
  // Idempotent.
  void Stop();

  // "host:port" actually bound: the numeric address and the port chosen.
  const std::string& address() const { return address_; }
  // Connections open now, authenticated or not.
  size_t connection_count() const;

 private:
  struct Loop;  // the thread's state; Reply objects share a part of it
  ControlServer() = default;

  std::string address_;
  std::shared_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace kvfabric::store
