// kvfabric-control-rtt: what a store control call costs over loopback. A
// ControlServer whose handler echoes the request at once and a ControlClient,
// in this process, each with its own thread, over one persistent connection:
// the round trip of one call at a time (median and p99 of --calls), then the
// calls per second with --depth calls kept in flight for --duration seconds.
// The bare fabric's figure for the same pattern comes from
// kvfabric-fabric-bench --queue_depth=1 (tools/bench/small_writes.sh).
//   kvfabric-control-rtt --calls 20000 --depth 64 --duration 3 --payload 64
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kvfabric/settings.h"
#include "store/wire/control_client.h"
#include "store/wire/control_server.h"

namespace {

using Clock = std::chrono::steady_clock;
using kvfabric::Status;

void Check(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "kvfabric-control-rtt: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvfabric-control-rtt: round trip and rate of the store's control channel over loopback"};
  int calls = 20000, depth = 64;
  double duration = 3;
  size_t payload_bytes = 64;
  std::string listen = "127.0.0.1:0", token;
  app.add_option("--calls", calls, "calls timed one at a time")->check(CLI::PositiveNumber);
  app.add_option("--depth", depth, "calls in flight for the rate")->check(CLI::PositiveNumber);
  app.add_option("--duration", duration, "seconds of the rate run")->check(CLI::PositiveNumber);
  app.add_option("--payload", payload_bytes, "bytes of each request (the reply is as long)");
  app.add_option("--listen", listen, "the server's address: 127.0.0.1:0, [::1]:0, ...");
  app.add_option("--token", token, "an auth token for both sides (the challenge-response runs once, at connect)");
  CLI11_PARSE(app, argc, argv);

  kvfabric::Settings settings;
  settings.auth_token = token;
  std::unique_ptr<kvfabric::store::ControlServer> server;
  Check(kvfabric::store::ControlServer::Start(
            listen, settings,
            [](uint64_t, std::string payload, kvfabric::store::ControlServer::Reply reply) {
              reply(Status::OK(), std::move(payload));
            },
            &server),
        "start the server");
  const std::string address = server->address();
  kvfabric::store::ControlClient client(settings);
  const std::string body(payload_bytes, 'k');
  auto deadline = [] { return kvfabric::net::DeadlineIn(5000); };

  std::string reply;
  for (int i = 0; i < 1000; ++i) Check(client.CallSync(address, body, deadline(), &reply), "warm-up call");
  std::vector<double> us(static_cast<size_t>(calls));
  for (auto& t : us) {
    const auto t0 = Clock::now();
    Check(client.CallSync(address, body, deadline(), &reply), "call");
    t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  std::sort(us.begin(), us.end());

  std::mutex mu;
  std::condition_variable cv;
  int outstanding = depth;
  std::atomic<long> completed{0};
  const auto t0 = Clock::now();
  const auto until = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration));
  std::function<void(Status, std::string)> again = [&](Status s, std::string) {
    Check(s, "call in flight");
    ++completed;
    if (Clock::now() < until) {
      client.Call(address, body, deadline(), again);
      return;
    }
    std::lock_guard<std::mutex> g(mu);
    if (--outstanding == 0) cv.notify_one();
  };
  for (int i = 0; i < depth; ++i) client.Call(address, body, deadline(), again);
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return outstanding == 0; });
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();

  std::printf("kvfabric-control-rtt: %s, %zu-byte requests and replies, one connection%s\n", address.c_str(),
              payload_bytes, token.empty() ? "" : ", authenticated");
  std::printf("1 call in flight, %d calls: round trip median %.1f us, p99 %.1f us\n", calls, us[us.size() / 2],
              us[std::min(us.size() - 1, us.size() * 99 / 100)]);
  std::printf("%d calls in flight, %.1f s: %.0f calls/s\n", depth, secs, static_cast<double>(completed.load()) / secs);
  return 0;
}
