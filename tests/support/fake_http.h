// A stand-in HTTP server on loopback for the store clients' deadline tests:
// it answers each request at once, or drips its answer (status line and
// headers included) one byte per interval, as a hung or hostile store does.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvfabric::test {

class FakeHttpServer {
 public:
  struct Reply {
    int status = 200;
    std::string body;
    bool drip = false;  // one byte every drip interval
  };
  // What to answer to `method` (GET, PUT, POST, ...) on `target` (path and query).
  using Handler = std::function<Reply(const std::string& method, const std::string& target)>;

  // Listens on 127.0.0.1 (port() tells which); `handler` runs on the
  // connection's own thread.
  FakeHttpServer(Handler handler, std::chrono::milliseconds drip_interval);
  // Stops dripping, closes every connection and joins the threads.
  ~FakeHttpServer();
  FakeHttpServer(const FakeHttpServer&) = delete;
  FakeHttpServer& operator=(const FakeHttpServer&) = delete;

  int port() const { return port_; }
  // Requests received so far (heads read whole) whose "METHOD target"
  // starts with `prefix`: requests("GET "), requests("POST /v3/kv/range").
  int requests(const std::string& prefix) const;

 private:
  void Accept();
  void Serve(int fd);

  Handler handler_;
  const std::chrono::milliseconds interval_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<std::thread> connections_;
  std::vector<std::string> seen_;  // "METHOD target"
};

}  // namespace kvfabric::test
