#include "engine/counters.h"

#include <gtest/gtest.h>

namespace kvfabric::engine {
namespace {

TEST(CountersTest, SizeClassIsTheFirstBoundAtLeastTheLength) {
  EXPECT_EQ(SizeClassOf(1), 0u);
  EXPECT_EQ(SizeClassOf(4096), 0u);
  EXPECT_EQ(SizeClassOf(4097), 1u);
  EXPECT_EQ(SizeClassOf(1 << 20), 2u);
  EXPECT_EQ(SizeClassOf((16 << 20) + 1), 4u);
  EXPECT_STREQ(kSizeClassNames[SizeClassOf(uint64_t{1} << 40)], "larger");
}

TEST(CountersTest, PeersPastTheLimitShareOther) {
  Counters c(2);
  PeerCounters* a = c.ForPeer("a:1");
  EXPECT_EQ(c.ForPeer("a:1"), a);
  PeerCounters* b = c.ForPeer("b:1");
  EXPECT_NE(a, b);
  PeerCounters* x = c.ForPeer("c:1");
  EXPECT_EQ(x->name, Counters::kOther);
  EXPECT_EQ(c.ForPeer("d:1"), x);
  // A peer first seen after the limit stays "other": counters never move
  // between labels, so each series only grows.
  EXPECT_EQ(c.ForPeer("c:1"), x);
  Counters none(0);
  EXPECT_EQ(none.ForPeer("a:1")->name, Counters::kOther);
}

TEST(CountersTest, RequestsCountByOpPeerCodeAndSize) {
  Counters c(8);
  PeerCounters* p = c.ForPeer("p:1");
  c.RequestEnded(p, true, 4096, 4096, Status::Code::kOk, 20'000);
  c.RequestEnded(p, true, 4096, 4096, Status::Code::kOk, 30'000);
  c.RequestEnded(p, false, 1 << 20, 1 << 20, Status::Code::kOk, 900'000);
  c.RequestEnded(p, false, 1 << 20, 0, Status::Code::kTimeout, 0);
  c.RequestEnded(c.self(), true, 100, 100, Status::Code::kOk, 1'000);
  c.RequestEnded(p, true, 8192, 4096, Status::Code::kFabricError, 0);
  c.Rerouted(true);
  c.Rerouted(false);
  c.RerouteRefused();
  c.Registered(true);
  c.Registered(false);
  EngineStats s;
  c.Fill(&s);
  ASSERT_EQ(s.peers.size(), 2u);  // p:1, then self ("other" had nothing)
  EXPECT_EQ(s.peers[0].peer, "p:1");
  EXPECT_EQ(s.peers[0].write_requests, 3u);
  EXPECT_EQ(s.peers[0].write_bytes, 3u * 4096);
  EXPECT_EQ(s.peers[0].read_requests, 2u);
  EXPECT_EQ(s.peers[0].read_bytes, 1u << 20);
  EXPECT_EQ(s.peers[0].failures, 2u);
  EXPECT_EQ(s.peers[1].peer, Counters::kSelf);
  ASSERT_EQ(s.failures.size(), 2u);
  EXPECT_EQ(s.failures[0].op, "write");
  EXPECT_EQ(s.failures[0].code, "FabricError");
  EXPECT_EQ(s.failures[1].op, "read");
  EXPECT_EQ(s.failures[1].code, "Timeout");
  // Latency of completed requests only: write 4KiB (3: two to p, one to self), read 1MiB (1).
  ASSERT_EQ(s.latency.size(), 2u);
  EXPECT_EQ(s.latency[0].op, "write");
  EXPECT_EQ(s.latency[0].size_class, "4KiB");
  EXPECT_EQ(s.latency[0].histogram.count, 3u);
  EXPECT_NEAR(s.latency[0].histogram.sum_seconds, 51e-6, 1e-12);
  EXPECT_EQ(s.latency[1].op, "read");
  EXPECT_EQ(s.latency[1].size_class, "1MiB");
  EXPECT_EQ(s.reroutes_failed, 1u);
  EXPECT_EQ(s.reroutes_stalled, 1u);
  EXPECT_EQ(s.reroutes_refused, 1u);
  EXPECT_EQ(s.registrations_total, 1u);
  EXPECT_EQ(s.registration_failures, 1u);
}

}  // namespace
}  // namespace kvfabric::engine
