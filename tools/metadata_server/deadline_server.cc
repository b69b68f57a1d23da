#include "deadline_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <vector>

namespace kvfabric::metadata_server {
namespace {

using Clock = std::chrono::steady_clock;

// Milliseconds left before `deadline`, for poll(): 0 once it has passed.
int MsLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

// Whether `fd` is ready for `events` before `deadline`; false once the
// deadline has passed, ready or not.
bool WaitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    if (Clock::now() >= deadline) return false;
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, MsLeft(deadline));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

void AddressOf(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  const int r = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                     : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  if (r != 0) return;
  char text[INET6_ADDRSTRLEN] = "";
  if (a.ss_family == AF_INET) {
    const auto* a4 = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &a4->sin_addr, text, sizeof(text));
    port = ntohs(a4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &a6->sin6_addr, text, sizeof(text));
    port = ntohs(a6->sin6_port);
  }
  ip = text;
}

// httplib::Stream over a socket: every wait ends at one deadline, and at
// most `budget` bytes are read in all. Reads are buffered, since httplib
// reads request lines one byte at a time.
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(int fd, Clock::time_point deadline, size_t budget)
      : fd_(fd), deadline_(deadline), budget_(budget), buf_(4096) {}

  bool is_readable() const override { return begin_ < end_ || WaitFor(fd_, POLLIN, deadline_); }
  bool is_writable() const override { return WaitFor(fd_, POLLOUT, deadline_); }

  // Never blocks past the deadline: the socket is only read or written
  // (MSG_DONTWAIT) after poll said it was ready.
  ssize_t read(char* ptr, size_t size) override {
    while (begin_ == end_) {
      if (budget_ == 0 || !WaitFor(fd_, POLLIN, deadline_)) return -1;
      const ssize_t n = recv(fd_, buf_.data(), std::min(buf_.size(), budget_), MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return n;
      budget_ -= static_cast<size_t>(n);
      begin_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, end_ - begin_);
    std::copy_n(buf_.data() + begin_, n, ptr);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    for (;;) {
      if (!WaitFor(fd_, POLLOUT, deadline_)) return -1;
      const ssize_t n = send(fd_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      return n;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { AddressOf(fd_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { AddressOf(fd_, false, ip, port); }
  socket_t socket() const override { return fd_; }

 private:
  const int fd_;
  const Clock::time_point deadline_;
  size_t budget_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;
};

// After the answer: stop sending, then read what the client still sends
// (up to `limit` bytes, until `until`) before closing. Closing with unread
// bytes makes the kernel send a reset, which can destroy the answer before
// the client reads it (a 413 to a body still arriving, for instance).
void LingeringClose(int fd, Clock::time_point until, size_t limit) {
  shutdown(fd, SHUT_WR);
  char scratch[16384];
  while (limit > 0 && WaitFor(fd, POLLIN, until)) {
    const ssize_t n = recv(fd, scratch, std::min(sizeof(scratch), limit), MSG_DONTWAIT);
    if (n <= 0 && !(n < 0 && (errno == EINTR || errno == EAGAIN))) break;
    if (n > 0) limit -= static_cast<size_t>(n);
  }
  close(fd);
}

}  // namespace

DeadlineServer::DeadlineServer(const Limits& limits) : limits_(limits) {
  const size_t threads = limits.threads;
  new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
}

bool DeadlineServer::Enter(const std::string& ip) {
  std::lock_guard<std::mutex> g(mu_);
  size_t& n = serving_[ip];
  if (n >= limits_.max_per_client) return false;
  ++n;
  return true;
}

void DeadlineServer::Leave(const std::string& ip) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = serving_.find(ip);
  if (it != serving_.end() && --it->second == 0) serving_.erase(it);
}

bool DeadlineServer::process_and_close_socket(socket_t sock) {
  std::string ip;
  int port = 0;
  AddressOf(sock, true, ip, port);
  if (!Enter(ip)) {
    const std::string why = "too many connections from " + ip + " at once (--max_per_client " +
                            std::to_string(limits_.max_per_client) + ")\n";
    const std::string answer = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: " +
                               std::to_string(why.size()) + "\r\nConnection: close\r\n\r\n" + why;
    (void)send(sock, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    LingeringClose(sock, Clock::now() + std::chrono::milliseconds(100), 64 << 10);
    return false;
  }
  const bool ok = Serve(sock);
  Leave(ip);
  return ok;
}

bool DeadlineServer::Serve(socket_t sock) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(limits_.request_timeout_ms);
  DeadlineStream stream(sock, deadline, limits_.max_request_bytes);
  bool connection_closed = false;
  const bool ok = process_request(stream, /*close_connection=*/true, connection_closed, nullptr);
  // A client that sends on past its refusal gets at most a second more.
  LingeringClose(sock, std::min(deadline, Clock::now() + std::chrono::seconds(1)), limits_.max_request_bytes);
  return ok;
}

}  // namespace kvfabric::metadata_server
