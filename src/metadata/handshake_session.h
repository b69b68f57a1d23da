// The handshake protocol, without sockets: what the server does with each
// frame of one connection (ServerSession) and how a client checks the
// server's challenge (ClientChallenge). The server's socket loop
// (handshake_server.cc), the client call (handshake_client.cc) and the fuzz
// target drive them.
//
// With a shared secret (KVF_AUTH_TOKEN) on the server, a connection begins
// with a mutual challenge-response; the secret itself never crosses the wire:
//
//   client -> kHello      client nonce (32 random bytes)
//   server -> kChallenge  server nonce (32) + ServerProof(token, nonces) (32)
//   client    checks the server's proof: a server without the token cannot
//             make it, and the client sends nothing more to it
//   client -> kAuth       ClientProof(token, nonces) (32)
//   server -> kReply      (empty), or kError PermissionDenied and close
//
// then requests (kGetSegment, kNotify, kProbe), each answered by kReply or
// kError. Until the proof is checked, frames are at most kPreAuthMaxFrame
// bytes. A client that holds a token refuses a server that has none, and a
// server that has a token refuses requests before authentication.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "kvfabric/status.h"
#include "metadata/frame.h"

namespace kvfabric::metadata {

// Largest frame a server reads before the client has authenticated: a
// hello or a proof fits; an announced 16 MiB payload does not.
constexpr size_t kPreAuthMaxFrame = 64;
// Largest reply a client reads before the server has proven itself: a
// challenge, or an error's text.
constexpr size_t kPreAuthMaxReply = 4096;

class ServerSession {
 public:
  // Answers one request; a non-OK status goes back to the client as kError.
  using Handler = std::function<Status(uint16_t type, const std::string& payload, std::string* reply)>;

  // `token` empty: no authentication. `max_frame` bounds frames after
  // authentication; after `max_requests` answered requests the session ends.
  ServerSession(std::string_view token, size_t max_frame, size_t max_requests, const Handler* handler);

  // What to send back for one frame, and whether to close afterwards.
  struct Step {
    uint16_t type = kReply;
    std::string payload;
    Status status;  // OK, or the error that a kError payload carries
    bool close = false;
  };
  Step OnFrame(const Frame& frame);

  // The payload bound for the next frame: kPreAuthMaxFrame until the client
  // has authenticated.
  size_t max_frame() const;
  // Past the challenge-response (or no token): requests come next.
  bool authenticated() const { return state_ == State::kReady; }

 private:
  enum class State { kAwaitHello, kAwaitProof, kReady };
  Step Refuse(Status s);
  Step OnHello(const Frame& f);
  Step OnProof(const Frame& f);
  Step OnRequest(const Frame& f);

  const std::string token_;
  const size_t max_frame_;
  const size_t max_requests_;
  const Handler* handler_;
  State state_;
  size_t requests_ = 0;
  std::string client_nonce_, server_nonce_;
};

// The client's side of the challenge: the kHello payload to send, then the
// kAuth payload to answer a server's challenge with.
class ClientChallenge {
 public:
  explicit ClientChallenge(std::string_view token);
  const std::string& hello() const { return client_nonce_; }
  // Checks the server's reply to the hello. OK: `proof` is the kAuth
  // payload. PermissionDenied when the server could not prove it holds the
  // token (or has none: a kError reply is returned as the server's status).
  Status Answer(const Frame& reply, std::string* proof) const;

 private:
  std::string token_;
  std::string client_nonce_;
};

}  // namespace kvfabric::metadata
