#include "tests/support/fake_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

namespace kvfabric::test {
namespace {

// Whether `fd` became readable within `ms`.
bool Readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, ms) > 0;
}

}  // namespace

FakeHttpServer::FakeHttpServer(Handler handler, std::chrono::milliseconds drip_interval)
    : handler_(std::move(handler)), interval_(drip_interval) {
  listener_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(listener_, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(listener_, 64) != 0 ||
      getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    std::abort();  // loopback always binds; nothing to test without it
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { Accept(); });
}

FakeHttpServer::~FakeHttpServer() {
  stop_ = true;
  acceptor_.join();
  close(listener_);
  std::vector<std::thread> connections;
  {
    std::lock_guard<std::mutex> g(mu_);
    connections.swap(connections_);
  }
  for (auto& t : connections) t.join();
}

int FakeHttpServer::requests(const std::string& prefix) const {
  std::lock_guard<std::mutex> g(mu_);
  int n = 0;
  for (const auto& r : seen_) n += r.rfind(prefix, 0) == 0;
  return n;
}

void FakeHttpServer::Accept() {
  while (!stop_) {
    if (!Readable(listener_, 20)) continue;
    const int fd = accept(listener_, nullptr, nullptr);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> g(mu_);
    connections_.emplace_back([this, fd] { Serve(fd); });
  }
}

void FakeHttpServer::Serve(int fd) {
  // The head, then Content-Length bytes of body (the clients under test send
  // no chunked bodies).
  std::string in;
  size_t head_end = std::string::npos;
  size_t body_len = 0;
  char buf[4096];
  while (!stop_) {
    if (head_end == std::string::npos) head_end = in.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      const size_t cl = in.find("Content-Length: ");
      body_len = cl != std::string::npos && cl < head_end ? std::strtoul(in.c_str() + cl + 16, nullptr, 10) : 0;
      if (in.size() >= head_end + 4 + body_len) break;
    }
    if (!Readable(fd, 20)) continue;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  if (stop_ || head_end == std::string::npos) {
    close(fd);
    return;
  }
  const std::string method = in.substr(0, in.find(' '));
  const size_t t0 = method.size() + 1;
  const std::string target = in.substr(t0, in.find(' ', t0) - t0);
  {
    std::lock_guard<std::mutex> g(mu_);
    seen_.push_back(method + " " + target);
  }
  const Reply r = handler_(method, target);
  const std::string out = "HTTP/1.1 " + std::to_string(r.status) + " X\r\nContent-Type: application/json\r\n" +
                          "Content-Length: " + std::to_string(r.body.size()) + "\r\nConnection: close\r\n\r\n" +
                          r.body;
  if (!r.drip) {
    (void)send(fd, out.data(), out.size(), MSG_NOSIGNAL);
  } else {
    for (size_t i = 0; i < out.size() && !stop_; ++i) {
      if (send(fd, out.data() + i, 1, MSG_NOSIGNAL) != 1) break;
      // Sleep in short steps so the destructor is not held up.
      const auto until = std::chrono::steady_clock::now() + interval_;
      while (!stop_ && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  close(fd);
}

}  // namespace kvfabric::test
