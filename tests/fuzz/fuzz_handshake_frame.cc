// libFuzzer target: what a handshake peer can send. The input is written to
// one end of a socket pair and read back as frames (bounded size, deadline),
// the first frame's payload also parsed as an address. Invariants: no crash,
// no hang, memory bounded by the frame limit.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "metadata/frame.h"
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
  for (int i = 0; i < 8; ++i) {
    Frame f;
    if (!ReadFrame(sv[1], 4096, DeadlineIn(50), &f).ok()) break;
    if (f.payload.size() > 4096) __builtin_trap();
    std::string host;
    uint16_t port;
    (void)kvfabric::net::ParseHostPort(f.payload, &host, &port);
  }
  close(sv[0]);
  close(sv[1]);
  return 0;
}
