// The caller's side of the store's control channel (control_server.h): one
// persistent TCP connection to each node this client talks to, opened on
// first use and kept, many calls in flight on it, matched to their replies
// by id (replies may come in any order). One thread serves every connection
// of a ControlClient with epoll; no thread or connection per call.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvfabric/settings.h"
#include "kvfabric/status.h"
#include "net/socket.h"

namespace kvfabric::store {

class ControlClient {
 public:
  // The end of one call: OK and the handler's reply, or the failure.
  using Done = std::function<void(Status status, std::string reply)>;

  // Uses from `settings`: auth_token (when set, each connection proves it
  // holds the token and checks that the node holds the same, before any
  // request is sent), handshake_max_frame (largest request and reply),
  // handshake_timeout_ms (connecting and authenticating, together). Starts
  // the client's thread.
  explicit ControlClient(const Settings& settings);
  // Fails every pending call with Closed and ends the thread. Must not run
  // on the client's thread (from a Done).
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  // Sends `payload` to the node at `address` ("host:port" or
  // "[v6addr]:port") over the connection to it, opened (and authenticated)
  // on first use or after a failure, and calls `done` exactly once, on the
  // client's thread, with the reply or the failure:
  //  - the Status the node's handler replied with, code and message as sent;
  //  - NetworkError: cannot connect (or not within handshake_timeout_ms), or
  //    the connection broke (every call pending on it fails at once), or
  //    Disconnect; the message says the address;
  //  - Timeout: `deadline` passed before the reply (a reply that comes later
  //    is dropped; the connection stays);
  //  - PermissionDenied: authentication failed (a token on one side only,
  //    or different tokens); every call pending on the connection fails;
  //  - InvalidArgument: `address` does not parse, or `payload` exceeds
  //    handshake_max_frame; NotFound: the host name does not resolve;
  //  - ProtocolError: the node sent a malformed frame or refused one;
  //  - Closed: the client was destroyed first.
  // Never blocks on the network (a host name is resolved on the client's
  // thread when the connection opens: prefer IP addresses). Calls made
  // while connecting wait for the connection. `done` must not block; it may
  // call Call or Disconnect.
  void Call(const std::string& address, std::string payload, net::Deadline deadline, Done done);
  // Call for each of `calls`, all posted to the client's thread at once
  // (one wake-up for the lot: a batch's messages to its homes).
  struct Request {
    std::string address;
    std::string payload;
    Done done;
  };
  void CallAll(std::vector<Request> calls, net::Deadline deadline);
  // Call, then waits for its end: the status, and the reply in `*reply`
  // when OK. Must not run on the client's thread (InvalidArgument).
  Status CallSync(const std::string& address, std::string payload, net::Deadline deadline, std::string* reply);
  // Drops the connection to `address`, after the calls made before: they
  // fail with NetworkError unless answered already; the next Call reconnects.
  void Disconnect(const std::string& address);
  // How many connections to `address` have ended (broken, failed or
  // dropped) so far: a reply that came after this was read came from the
  // same process as every reply until the count moves (a node that
  // restarted broke its connection). Any thread.
  uint64_t Losses(const std::string& address) const;

 private:
  struct Loop;  // the thread's state
  std::unique_ptr<Loop> loop_;
};

}  // namespace kvfabric::store
