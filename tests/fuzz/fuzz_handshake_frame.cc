// libFuzzer target: what a handshake peer can send. The input is written to
// one end of a socket pair and read back as frames (bounded size, deadline),
// each payload also parsed as an address, and the frames fed to the server's
// session (with a token: the challenge-response; without: requests) and to a
// client checking them as a challenge. Invariants: no crash, no hang, memory
// bounded by the frame limit, no request served before authentication.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "metadata/frame.h"
#include "metadata/handshake_session.h"
#include "net/address.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvfabric::metadata;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 0;
  // Inputs fit in the socket buffer (libFuzzer's -max_len keeps them small).
  if (size > 0 && write(sv[0], data, size) < 0) {
    close(sv[0]);
    close(sv[1]);
    return 0;
  }
  shutdown(sv[0], SHUT_WR);
  int served_with_token = 0;
  ServerSession::Handler with_token = [&](uint16_t, const std::string&, std::string* r) {
    ++served_with_token;
    *r = "served";
    return kvfabric::Status::OK();
  };
  ServerSession::Handler open = [](uint16_t, const std::string& p, std::string* r) {
    *r = p;
    return kvfabric::Status::OK();
  };
  ServerSession guarded("fuzz-token", 4096, 4, &with_token), unguarded("", 4096, 4, &open);
  ClientChallenge client("fuzz-token");
  bool guarded_open = true, unguarded_open = true;
  for (int i = 0; i < 8; ++i) {
    Frame f;
    if (!ReadFrame(sv[1], 4096, DeadlineIn(50), &f).ok()) break;
    if (f.payload.size() > 4096) __builtin_trap();
    std::string host;
    uint16_t port;
    (void)kvfabric::net::ParseHostPort(f.payload, &host, &port);
    if (guarded_open && f.payload.size() <= guarded.max_frame()) guarded_open = !guarded.OnFrame(f).close;
    if (unguarded_open) unguarded_open = !unguarded.OnFrame(f).close;
    std::string proof;
    if (client.Answer(f, &proof).ok()) __builtin_trap();  // a proof the fuzzer forged
  }
  if (served_with_token != 0) __builtin_trap();  // served without the token
  close(sv[0]);
  close(sv[1]);
  return 0;
}
