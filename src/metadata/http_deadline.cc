#include "metadata/http_deadline.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace kvfabric::metadata {

httplib::Result SendWithDeadline(httplib::Client* client, int64_t timeout_ms,
                                 const std::function<httplib::Result()>& send, bool* expired) {
  const std::chrono::milliseconds limit(timeout_ms);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  client->set_connection_timeout(limit);
  client->set_read_timeout(limit);
  client->set_write_timeout(limit);

  std::mutex mu;
  std::condition_variable cv;
  bool done = false, fired = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> g(mu);
    if (cv.wait_until(g, deadline, [&] { return done; })) return;
    fired = true;
    // stop() shuts the socket down only while a request is in flight; one
    // still connecting holds the client's socket lock until its (bounded)
    // connect ends, and a later stop() catches it then.
    do {
      g.unlock();
      client->stop();
      g.lock();
    } while (!cv.wait_for(g, std::chrono::milliseconds(20), [&] { return done; }));
  });
  httplib::Result res = send();
  {
    std::lock_guard<std::mutex> g(mu);
    done = true;
    *expired = fired && !res;
  }
  cv.notify_one();
  watchdog.join();
  return res;
}

}  // namespace kvfabric::metadata
