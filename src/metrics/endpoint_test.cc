#include "metrics/endpoint.h"

#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "metrics/families.h"

namespace kvfabric::metrics {
namespace {

TEST(ParseListenTest, TakesHostPortAndRanges) {
  std::string host;
  int first = -1, last = -1;
  ASSERT_TRUE(ParseListen("127.0.0.1:9400", &host, &first, &last).ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(first, 9400);
  EXPECT_EQ(last, 9400);
  ASSERT_TRUE(ParseListen("0.0.0.0:9400-9415", &host, &first, &last).ok());
  EXPECT_EQ(first, 9400);
  EXPECT_EQ(last, 9415);
  ASSERT_TRUE(ParseListen("[::1]:0", &host, &first, &last).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(first, 0);
}

TEST(ParseListenTest, RefusesWhatIsNotHostPort) {
  std::string host = "unchanged";
  int first = -1, last = -1;
  for (const char* bad : {"", "9400", ":9400", "host:", "host:x", "host:70000", "host:9415-9400", "host:0-10",
                          "host:1-", "host:-5", "host:12ab"}) {
    const Status s = ParseListen(bad, &host, &first, &last);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("host:port"), std::string::npos) << s.message();
  }
  EXPECT_EQ(host, "unchanged");
  EXPECT_EQ(first, -1);
}

std::vector<prometheus::MetricFamily> OneCounter(const std::string& engine, double v) {
  auto f = Family("kvfabric_test_total", "A test counter", prometheus::MetricType::Counter);
  AddSample(&f, {{"engine", engine}}, v);
  return {f};
}

TEST(EndpointTest, ServesMetricsHealthAnd404) {
  std::unique_ptr<Endpoint::Membership> m;
  ASSERT_TRUE(Endpoint::Join("127.0.0.1:0", [] { return OneCounter("a", 7); }, &m).ok());
  const std::string addr = m->address();
  ASSERT_EQ(addr.rfind("127.0.0.1:", 0), 0u) << addr;
  httplib::Client c("http://" + addr);
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(r->body.find("# TYPE kvfabric_test_total counter"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("kvfabric_test_total{engine=\"a\"} 7"), std::string::npos) << r->body;
  r = c.Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok\n");
  for (const char* path : {"/", "/metricsx", "/metrics/../etc", "/favicon.ico"}) {
    r = c.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 404) << path;
    EXPECT_NE(r->body.find("GET /metrics"), std::string::npos) << r->body;
  }
  r = c.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
}

// Clients that send half a request and stop, as many as the endpoint has
// threads, delay a scrape by its read timeout (a second) at most.
TEST(EndpointTest, HalfSentRequestsHoldScrapesUpForASecondAtMost) {
  std::unique_ptr<Endpoint::Membership> m;
  ASSERT_TRUE(Endpoint::Join("127.0.0.1:0", [] { return OneCounter("a", 7); }, &m).ok());
  std::string host;
  uint16_t port = 0;
  const std::string addr = m->address();
  host = addr.substr(0, addr.rfind(':'));
  port = static_cast<uint16_t>(std::stoi(addr.substr(addr.rfind(':') + 1)));
  std::vector<int> half;
  for (int i = 0; i < 4; ++i) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    const char partial[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
    ASSERT_GT(send(fd, partial, sizeof(partial) - 1, MSG_NOSIGNAL), 0);
    half.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  httplib::Client c("http://" + addr);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c.Get("/metrics");
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_LT(took, std::chrono::milliseconds(2500)) << "a scrape waited behind half-sent requests";
  for (int fd : half) close(fd);
}

TEST(EndpointTest, SourcesOfOneAddressShareTheEndpointAndItsFamilies) {
  std::unique_ptr<Endpoint::Membership> a, b;
  ASSERT_TRUE(Endpoint::Join("127.0.0.1:0", [] { return OneCounter("a", 1); }, &a).ok());
  ASSERT_TRUE(Endpoint::Join("127.0.0.1:0", [] { return OneCounter("b", 2); }, &b).ok());
  EXPECT_EQ(a->address(), b->address());
  httplib::Client c("http://" + a->address());
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  // One family, declared once, with both engines' samples.
  size_t types = 0;
  for (size_t at = 0; (at = r->body.find("# TYPE kvfabric_test_total", at)) != std::string::npos; ++at) ++types;
  EXPECT_EQ(types, 1u) << r->body;
  EXPECT_NE(r->body.find("engine=\"a\"} 1"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("engine=\"b\"} 2"), std::string::npos) << r->body;
  b.reset();  // leaving removes the source; the endpoint stays for the other
  r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body.find("engine=\"b\""), std::string::npos) << r->body;
  const std::string addr = a->address();
  a.reset();  // the last member: the port is free again
  httplib::Client gone("http://" + addr);
  gone.set_connection_timeout(1);
  EXPECT_FALSE(gone.Get("/healthz"));
}

TEST(EndpointTest, ARangeTakesTheNextFreePortAndABusyPortIsUnavailable) {
  std::unique_ptr<Endpoint::Membership> first;
  ASSERT_TRUE(Endpoint::Join("127.0.0.1:0", [] { return OneCounter("a", 1); }, &first).ok());
  const int port = std::stoi(first->address().substr(first->address().rfind(':') + 1));
  // Another process would ask with the same spec; here a different spec
  // naming the same port stands for it.
  std::unique_ptr<Endpoint::Membership> busy;
  const Status s =
      Endpoint::Join("127.0.0.1:" + std::to_string(port), [] { return OneCounter("b", 1); }, &busy);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("KVF_METRICS_LISTEN"), std::string::npos);
  EXPECT_EQ(busy, nullptr);
  if (port < 65535) {
    std::unique_ptr<Endpoint::Membership> next;
    const std::string range = "127.0.0.1:" + std::to_string(port) + "-" + std::to_string(port + 1);
    const Status r = Endpoint::Join(range, [] { return OneCounter("c", 1); }, &next);
    if (r.ok()) EXPECT_EQ(next->address(), "127.0.0.1:" + std::to_string(port + 1));
    else EXPECT_EQ(r.code(), Status::Code::kUnavailable);  // port+1 taken by someone else
  }
}

TEST(FamiliesTest, HistogramsAreCumulativeWithInfLast) {
  EngineStats s;
  s.engine = "e:1";
  LatencyStats l{"write", "4KiB", {}};
  l.histogram.upper_seconds = {0.001, 0.01};
  l.histogram.counts = {2, 3, 1};
  l.histogram.count = 6;
  l.histogram.sum_seconds = 0.5;
  s.latency.push_back(l);
  auto families = EngineFamilies(s);
  const prometheus::MetricFamily* h = nullptr;
  for (const auto& f : families)
    if (f.name == "kvfabric_request_latency_seconds") h = &f;
  ASSERT_NE(h, nullptr);
  ASSERT_EQ(h->metric.size(), 1u);
  const auto& m = h->metric[0];
  ASSERT_EQ(m.histogram.bucket.size(), 3u);
  EXPECT_EQ(m.histogram.bucket[0].cumulative_count, 2u);
  EXPECT_EQ(m.histogram.bucket[1].cumulative_count, 5u);
  EXPECT_EQ(m.histogram.bucket[2].cumulative_count, 6u);
  EXPECT_TRUE(std::isinf(m.histogram.bucket[2].upper_bound));
  EXPECT_EQ(m.histogram.sample_count, 6u);
  EXPECT_EQ(m.label.front().name, "engine");
  EXPECT_EQ(m.label.front().value, "e:1");
}

TEST(FamiliesTest, NamesFollowPrometheusConventions) {
  EngineStats s;
  s.rails.push_back(RailStats{});
  s.peers.push_back(PeerStats{"p:1"});
  s.failures.push_back({"read", "Timeout", 1});
  s.registrations.push_back({"cpu:0", 1, 4096});
  StoreStats st;
  auto families = EngineFamilies(s);
  for (auto& f : StoreFamilies("e", "10.0.0.1:7400", st, {})) families.push_back(f);
  for (const auto& f : families) {
    EXPECT_EQ(f.name.rfind("kvfabric_", 0), 0u) << f.name;
    const bool total = f.name.size() > 6 && f.name.substr(f.name.size() - 6) == "_total";
    EXPECT_EQ(total, f.type == prometheus::MetricType::Counter) << f.name;
    EXPECT_FALSE(f.help.empty()) << f.name;
  }
}

}  // namespace
}  // namespace kvfabric::metrics
