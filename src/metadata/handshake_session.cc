#include "metadata/handshake_session.h"

#include "common/crypto.h"
#include "common/text.h"
#include "metadata/auth.h"

namespace kvfabric::metadata {

ServerSession::ServerSession(std::string_view token, size_t max_frame, size_t max_requests, const Handler* handler)
    : token_(token),
      max_frame_(max_frame),
      max_requests_(max_requests),
      handler_(handler),
      state_(token.empty() ? State::kReady : State::kAwaitHello) {}

size_t ServerSession::max_frame() const { return state_ == State::kReady ? max_frame_ : kPreAuthMaxFrame; }

ServerSession::Step ServerSession::Refuse(Status s) {
  Step step;
  step.type = kError;
  step.payload = ErrorPayload(s);
  step.status = std::move(s);
  step.close = true;
  return step;
}

ServerSession::Step ServerSession::OnFrame(const Frame& f) {
  switch (state_) {
    case State::kAwaitHello: return OnHello(f);
    case State::kAwaitProof: return OnProof(f);
    case State::kReady: return OnRequest(f);
  }
  return Refuse(Status::ProtocolError("handshake session in an unknown state"));
}

ServerSession::Step ServerSession::OnHello(const Frame& f) {
  if (f.type != kHello)
    return Refuse(Status::PermissionDenied("this engine requires a shared secret: set KVF_AUTH_TOKEN on both sides"));
  if (f.payload.size() != auth::kNonceSize)
    return Refuse(Status::ProtocolError(text::Format(
        "hello of {} bytes: a client nonce is {} (a kvfabric older than the challenge-response handshake?)",
        f.payload.size(), auth::kNonceSize)));
  client_nonce_ = f.payload;
  server_nonce_ = auth::NewNonce();
  state_ = State::kAwaitProof;
  Step step;
  step.type = kChallenge;
  step.payload = server_nonce_ + auth::ServerProof(token_, client_nonce_, server_nonce_);
  return step;
}

ServerSession::Step ServerSession::OnProof(const Frame& f) {
  if (f.type != kAuth) return Refuse(Status::ProtocolError("expected the client's proof (kAuth) after a challenge"));
  if (!crypto::SameBytes(f.payload, auth::ClientProof(token_, client_nonce_, server_nonce_)))
    return Refuse(Status::PermissionDenied("wrong KVF_AUTH_TOKEN: this engine refuses the connection"));
  state_ = State::kReady;
  return Step{};
}

ServerSession::Step ServerSession::OnRequest(const Frame& f) {
  if (f.type == kHello)
    return Refuse(token_.empty() ? Status::PermissionDenied(
                                       "this engine has no KVF_AUTH_TOKEN and the client has one: set the same "
                                       "token on both sides")
                                 : Status::ProtocolError("a second hello on an authenticated connection"));
  if (f.type != kGetSegment && f.type != kNotify && f.type != kProbe && f.type != kNotice)
    return Refuse(Status::ProtocolError(text::Format("unknown handshake request type {}", f.type)));
  Step step;
  Status s = (*handler_)(f.type, f.payload, &step.payload);
  if (!s.ok()) {
    step.type = kError;
    step.payload = ErrorPayload(s);
    step.status = std::move(s);
  }
  step.close = ++requests_ >= max_requests_;
  return step;
}

ClientChallenge::ClientChallenge(std::string_view token) : token_(token), client_nonce_(auth::NewNonce()) {}

Status ClientChallenge::Answer(const Frame& reply, std::string* proof) const {
  if (reply.type == kError) return StatusFromErrorPayload(reply.payload);
  const std::string_view p = reply.payload;
  if (reply.type != kChallenge || p.size() != 2 * auth::kNonceSize)
    return Status::ProtocolError(text::Format(
        "the server answered the hello with a frame of type {} and {} bytes, not a challenge (a kvfabric older "
        "than the challenge-response handshake?)",
        reply.type, p.size()));
  const std::string_view server_nonce = p.substr(0, auth::kNonceSize);
  if (!crypto::SameBytes(p.substr(auth::kNonceSize), auth::ServerProof(token_, client_nonce_, server_nonce)))
    return Status::PermissionDenied(
        "the server could not prove it holds this engine's KVF_AUTH_TOKEN (a different token, or not the engine "
        "meant): nothing was sent to it");
  *proof = auth::ClientProof(token_, client_nonce_, server_nonce);
  return Status::OK();
}

}  // namespace kvfabric::metadata
