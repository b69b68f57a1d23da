#include "net/socket.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "net/address.h"

namespace kvfabric::net {

int RemainingMs(Deadline d) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - std::chrono::steady_clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

bool WaitFd(int fd, short events, Deadline d) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, RemainingMs(d));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return true;  // let the following call report the error
  }
}

Status OpenTcpSocket(int family, const std::string& where, int* fd) {
  *fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (*fd >= 0) return Status::OK();
  const int e = errno;
  return Status::NetworkError("cannot open a " + std::string(family == AF_INET6 ? "IPv6" : "IPv4") +
                              " socket for " + where + ": " + std::strerror(e) +
                              (family == AF_INET6 ? " (is IPv6 enabled on this host?)" : ""));
}

namespace {

// Waits for a non-blocking connect that is in progress; closes fd on failure.
Status FinishConnect(int fd, const std::string& where, Deadline deadline) {
  if (!WaitFd(fd, POLLOUT, deadline)) {
    close(fd);
    return Status::Timeout("connect to " + where + " timed out");
  }
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err == 0) return Status::OK();
  close(fd);
  return Status::NetworkError("connect to " + where + " failed: " + std::strerror(err) +
                              " (is a kvfabric engine serving that segment?)");
}

}  // namespace

Status ConnectTcp(const std::string& host, uint16_t port, Deadline deadline, int* fd_out) {
  SocketAddress sa;
  KVF_RETURN_IF_ERROR(ResolveHost(host, &sa));
  sa.set_port(port);
  const std::string where = FormatHostPort(host, port);
  int fd = -1;
  KVF_RETURN_IF_ERROR(OpenTcpSocket(sa.family(), where, &fd));
  if (connect(fd, sa.get(), sa.length) != 0) {
    if (errno != EINPROGRESS) {
      const int e = errno;
      close(fd);
      return Status::NetworkError("connect to " + where + " failed: " + std::strerror(e) +
                                  " (is a kvfabric engine serving that segment?)");
    }
    KVF_RETURN_IF_ERROR(FinishConnect(fd, where, deadline));
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  *fd_out = fd;
  return Status::OK();
}

}  // namespace kvfabric::net
