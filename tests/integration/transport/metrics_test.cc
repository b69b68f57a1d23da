// The metrics endpoint (KVF_METRICS_LISTEN) of an engine moving bytes to a
// separate process: what a scrape says matches what moved, a killed peer
// shows as failures by status code, and the endpoint refuses other paths.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/transport/fixture.h"
#include "tools/common/pattern.h"

namespace kvfabric::test {
namespace {

using tools::FillPattern;
using Labels = std::vector<std::pair<std::string, std::string>>;

// The sum of the samples of `name` in a text-format scrape whose labels
// include every one of `labels` (-1 when none matches).
double Sample(const std::string& body, const std::string& name, const Labels& labels) {
  std::istringstream in(body);
  std::string line;
  double sum = -1;
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) != 0 && line.rfind(name + " ", 0) != 0) continue;
    const auto close = line.rfind('}');
    const std::string label_text = close == std::string::npos ? "" : line.substr(name.size(), close - name.size());
    bool all = true;
    for (const auto& [k, v] : labels) all = all && label_text.find(k + "=\"" + v + "\"") != std::string::npos;
    if (!all) continue;
    sum = (sum < 0 ? 0 : sum) + std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

std::string Scrape(const std::string& address, const std::string& path = "/metrics", int* status = nullptr) {
  httplib::Client c("http://" + address);
  c.set_read_timeout(5);
  auto r = c.Get(path);
  if (!r) return "";
  if (status) *status = r->status;
  return r->body;
}

class MetricsTest : public TransportFixture {
 protected:
  void StartWithEndpoint(size_t target_size) {
    cfg_.settings.metrics_listen = "127.0.0.1:0";
    ASSERT_NO_FATAL_FAILURE(Start(target_size));
    address_ = engine_->metrics_address();
    ASSERT_FALSE(address_.empty());
  }
  std::string address_;
};

TEST_P(MetricsTest, ScrapesDuringATransferMatchTheBytesAndRequestsMoved) {
  ASSERT_NO_FATAL_FAILURE(StartWithEndpoint(16 * MiB));
  // Writes and reads of three size classes, checked at the target, while
  // another thread scrapes: every counter only grows, and at the end each
  // equals what moved.
  const std::vector<size_t> sizes = {4 * KiB, 256 * KiB, 4 * MiB};
  size_t writes = 0, reads = 0, write_bytes = 0, read_bytes = 0;
  std::atomic<bool> done{false};
  std::vector<double> seen;
  std::thread scraper([&] {
    while (!done.load()) {
      seen.push_back(Sample(Scrape(address_), "kvfabric_transferred_bytes_total", {}));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  for (int round = 0; round < 20; ++round) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      const size_t len = sizes[i], off = i * 4 * MiB;
      const uint32_t seed = static_cast<uint32_t>(round * 10 + i);
      FillPattern(local(off), len, off, seed);
      ASSERT_TRUE(engine_->Transfer({Req(OpCode::kWrite, off, off, len)}).ok());
      ASSERT_EQ(target_->Check(off, len, seed), len) << "round " << round << " size " << len;
      ++writes, write_bytes += len;
      ASSERT_TRUE(engine_->Transfer({Req(OpCode::kRead, 64 * MiB + off, off, len)}).ok());
      ASSERT_EQ(tools::CheckPattern(local(64 * MiB + off), len, off, seed), len);
      ++reads, read_bytes += len;
    }
  }
  done = true;
  scraper.join();
  ASSERT_GE(seen.size(), 2u);
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_GE(seen[i], seen[i - 1]) << "a counter went back";

  const std::string body = Scrape(address_);
  const Labels peer = {{"peer", target_->name}};
  auto with = [](Labels l, std::pair<std::string, std::string> more) {
    l.push_back(std::move(more));
    return l;
  };
  EXPECT_EQ(Sample(body, "kvfabric_requests_total", with(peer, {"op", "write"})), writes);
  EXPECT_EQ(Sample(body, "kvfabric_requests_total", with(peer, {"op", "read"})), reads);
  EXPECT_EQ(Sample(body, "kvfabric_transferred_bytes_total", with(peer, {"op", "write"})), write_bytes);
  EXPECT_EQ(Sample(body, "kvfabric_transferred_bytes_total", with(peer, {"op", "read"})), read_bytes);
  // The rails carried the same bytes, in as many operations or more (cut at
  // chunk edges and the provider's largest message).
  EXPECT_EQ(Sample(body, "kvfabric_rail_bytes_total", {{"op", "write"}}), write_bytes);
  EXPECT_EQ(Sample(body, "kvfabric_rail_bytes_total", {{"op", "read"}}), read_bytes);
  EXPECT_GE(Sample(body, "kvfabric_rail_operations_total", {{"op", "write"}}), writes);
  EXPECT_EQ(Sample(body, "kvfabric_rail_errors_total", {}), 0);
  EXPECT_EQ(Sample(body, "kvfabric_request_failures_total", {}), -1) << "no failure rows";
  // Latency: every completed request once, in its size class.
  for (const char* op : {"write", "read"}) {
    EXPECT_EQ(Sample(body, "kvfabric_request_latency_seconds_count", {{"op", op}, {"size", "4KiB"}}), 20) << op;
    EXPECT_EQ(Sample(body, "kvfabric_request_latency_seconds_count", {{"op", op}, {"size", "1MiB"}}), 20) << op;
    EXPECT_EQ(Sample(body, "kvfabric_request_latency_seconds_count", {{"op", op}, {"size", "16MiB"}}), 20) << op;
    EXPECT_EQ(Sample(body, "kvfabric_request_latency_seconds_bucket", {{"op", op}, {"size", "4KiB"}, {"le", "+Inf"}}),
              20);
    EXPECT_GT(Sample(body, "kvfabric_request_latency_seconds_sum", {{"op", op}}), 0);
  }
  EXPECT_EQ(Sample(body, "kvfabric_registered_buffers", {}), 1);
  EXPECT_EQ(Sample(body, "kvfabric_registered_bytes", {}), kLocalSize);
  EXPECT_EQ(Sample(body, "kvfabric_peers", {}), 1);
  EXPECT_GE(Sample(body, "kvfabric_rail_peer_slots", {}), 1);
  // Engine::Stats says the same.
  EngineStats st;
  ASSERT_TRUE(engine_->Stats(&st).ok());
  uint64_t stat_bytes = 0;
  for (const PeerStats& p : st.peers) stat_bytes += p.write_bytes + p.read_bytes;
  EXPECT_EQ(stat_bytes, write_bytes + read_bytes);
  EXPECT_EQ(st.engine, engine_->name());
  EXPECT_EQ(Sample(body, "kvfabric_rail_in_service", {}), st.rails.size()) << "every rail in service";
}

TEST_P(MetricsTest, AKilledPeerShowsAsFailuresByCode) {
  cfg_.settings.transfer_timeout_ms = 3000;
  ASSERT_NO_FATAL_FAILURE(StartWithEndpoint(64 * MiB));
  BatchId b;
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 64; ++i) reqs.push_back(Req(i % 2 ? OpCode::kRead : OpCode::kWrite, i * MiB, i * MiB, MiB));
  ASSERT_TRUE(target_->Freeze());  // so the batch is in flight at the kill
  ASSERT_NO_FATAL_FAILURE(SubmitBatch(reqs, &b));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(target_->Kill());
  TransferStatus agg;
  ASSERT_TRUE(engine_->WaitBatch(b, 15000, &agg).ok());
  size_t failed = 0, completed = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    TransferStatus st;
    ASSERT_TRUE(engine_->GetTaskStatus(b, i, &st).ok());
    (st.state == TaskState::kCompleted ? completed : failed) += 1;
  }
  ASSERT_GT(failed, 0u);
  const std::string body = Scrape(address_);
  // Every request that did not complete is one failure, under its code.
  EXPECT_EQ(Sample(body, "kvfabric_request_failures_total", {}), failed) << body;
  EXPECT_EQ(Sample(body, "kvfabric_peer_failures_total", {{"peer", target_->name}}), failed);
  EXPECT_EQ(Sample(body, "kvfabric_requests_total", {{"peer", target_->name}}), reqs.size());
  EngineStats st;
  ASSERT_TRUE(engine_->Stats(&st).ok());
  uint64_t by_code = 0;
  for (const FailureStats& f : st.failures) {
    EXPECT_FALSE(f.code.empty());
    EXPECT_NE(f.code, "OK");
    EXPECT_GT(Sample(body, "kvfabric_request_failures_total", {{"op", f.op}, {"code", f.code}}), 0) << f.code;
    by_code += f.count;
  }
  EXPECT_EQ(by_code, failed);
  EXPECT_TRUE(engine_->FreeBatch(b).ok());
}

TEST_P(MetricsTest, TheEndpointAnswersHealthAndRefusesOtherPaths) {
  ASSERT_NO_FATAL_FAILURE(StartWithEndpoint(4 * MiB));
  int status = 0;
  EXPECT_EQ(Scrape(address_, "/healthz", &status), "ok\n");
  EXPECT_EQ(status, 200);
  for (const char* path : {"/", "/metrics.json", "/debug/pprof", "/healthz/x"}) {
    status = 0;
    const std::string body = Scrape(address_, path, &status);
    EXPECT_EQ(status, 404) << path;
    EXPECT_NE(body.find("/metrics"), std::string::npos) << body;
  }
  // After Close the endpoint is gone with the engine.
  engine_->Close();
  EXPECT_EQ(engine_->metrics_address(), "");
  httplib::Client c("http://" + address_);
  c.set_connection_timeout(1);
  EXPECT_FALSE(c.Get("/healthz"));
}

INSTANTIATE_TEST_SUITE_P(Transports, MetricsTest, ::testing::ValuesIn(PeerFailureCases()), CaseName);

}  // namespace
}  // namespace kvfabric::test
