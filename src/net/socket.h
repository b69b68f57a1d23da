// TCP sockets with deadlines: every wait is bounded, so a slow or hostile
// peer costs at most one timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "kvfabric/status.h"

namespace kvfabric::net {

using Deadline = std::chrono::steady_clock::time_point;
inline Deadline DeadlineIn(int64_t ms) { return std::chrono::steady_clock::now() + std::chrono::milliseconds(ms); }
// Milliseconds left until `d`, 0 when it passed.
int RemainingMs(Deadline d);
// Waits for `events` (poll flags) on `fd` until `d`; false on timeout.
bool WaitFd(int fd, short events, Deadline d);

// A non-blocking, close-on-exec TCP socket of `family`; `where` names the
// address it is for in the error.
Status OpenTcpSocket(int family, const std::string& where, int* fd);
// Non-blocking connect, of the family `host` resolves to, bounded by `deadline`.
Status ConnectTcp(const std::string& host, uint16_t port, Deadline deadline, int* fd);

}  // namespace kvfabric::net
