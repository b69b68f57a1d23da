#include "fabric/rail_health.h"

#include <gtest/gtest.h>

namespace kvfabric::fabric {
namespace {

constexpr int64_t kMs = 1000000;
constexpr uint64_t kMiB = 1 << 20;
// A fake steady clock; never 0 (a window start of 0 means "none").
constexpr int64_t kT0 = 1000 * kMs;

TEST(RailHealthTest, ThroughputIsMeasuredOnlyOverWindowsWithABacklog) {
  RailHealth h(2000 * kMs, 5000 * kMs);
  // Below 1 MiB queued or in flight: the rail shows its demand, not its speed.
  h.Sample(kT0, kMiB - 1, 0);
  h.Sample(kT0 + 60 * kMs, kMiB - 1, 100 * kMiB);
  EXPECT_EQ(h.Throughput(kT0 + 60 * kMs, 1000 * kMs), 0.0);

  // A window opens with a backlog; it needs 50 ms to give a sample.
  const int64_t t = kT0 + 100 * kMs;
  h.Sample(t, kMiB, 1000);
  h.Sample(t + 49 * kMs, 4 * kMiB, 1000 + 4900000);
  EXPECT_EQ(h.Throughput(t + 49 * kMs, 1000 * kMs), 0.0);
  h.Sample(t + 50 * kMs, 4 * kMiB, 1000 + 5000000);
  EXPECT_DOUBLE_EQ(h.Throughput(t + 50 * kMs, 1000 * kMs), 1e8);  // 5 MB in 50 ms
}

TEST(RailHealthTest, ALoadDipDiscardsTheWindowUnderWay) {
  RailHealth h(2000 * kMs, 5000 * kMs);
  h.Sample(kT0, 2 * kMiB, 0);
  h.Sample(kT0 + 20 * kMs, kMiB - 1, 1000000);  // idle for a moment
  h.Sample(kT0 + 30 * kMs, 2 * kMiB, 2000000);  // a new window opens here
  h.Sample(kT0 + 60 * kMs, 2 * kMiB, 5000000);  // would have closed the first; the new one is 30 ms old
  EXPECT_EQ(h.Throughput(kT0 + 60 * kMs, 1000 * kMs), 0.0);
  h.Sample(kT0 + 80 * kMs, 2 * kMiB, 7000000);
  EXPECT_DOUBLE_EQ(h.Throughput(kT0 + 80 * kMs, 1000 * kMs), 1e8);  // 5 MB in the 50 ms since 30
}

TEST(RailHealthTest, LargeSlicesCompletingInLumpsGiveTheirTrueRate) {
  // 4 MiB slices completing every 16 ms (262 MB/s), polled every 1 ms from
  // mid-slice on: a window from poll to poll would count 3 or 4 slices in
  // 50 ms (210 or 280 MB/s); windows from completion to completion count
  // the rate itself.
  RailHealth h(2000 * kMs, 5000 * kMs);
  const int64_t start = kT0 + 7 * kMs;  // the backlog began mid-slice of an earlier run
  h.Sample(kT0, 0, 0);
  uint64_t done = 0;
  for (int64_t t = start; t <= start + 400 * kMs; t += kMs) {
    if ((t - start) % (16 * kMs) == 9 * kMs) done += 4 * kMiB;  // completions 9 ms after the first poll
    h.Sample(t, 16 * kMiB, done);
  }
  const double rate = 4.0 * kMiB / 0.016;
  EXPECT_NEAR(h.Throughput(start + 400 * kMs, 1000 * kMs), rate, rate * 0.01);
}

// First sample 100 MB/s at kT0 + 50 ms.
void FirstSample(RailHealth* h) {
  h->Sample(kT0, 2 * kMiB, 0);
  h->Sample(kT0 + 50 * kMs, 2 * kMiB, 5000000);
  ASSERT_DOUBLE_EQ(h->Throughput(kT0 + 50 * kMs, 1000 * kMs), 1e8);
}

TEST(RailHealthTest, AFreshEstimateIsAveragedWithTheNewSample) {
  RailHealth h(2000 * kMs, 5000 * kMs);
  FirstSample(&h);
  const int64_t at = kT0 + 50 * kMs;
  // Next window back to back: 300 MB/s, averaged half and half.
  h.Sample(at + 50 * kMs, 2 * kMiB, 5000000 + 15000000);
  EXPECT_DOUBLE_EQ(h.Throughput(at + 50 * kMs, 1000 * kMs), 2e8);
}

TEST(RailHealthTest, AnEstimateFourWindowsOldIsReplaced) {
  // The estimate is fresh while younger than 4 windows (200 ms) when the
  // new sample ends.
  for (int64_t end : {199 * kMs, 200 * kMs}) {
    RailHealth h(2000 * kMs, 5000 * kMs);
    FirstSample(&h);
    const int64_t at = kT0 + 50 * kMs;
    h.Sample(at + 1, kMiB - 1, 5000000);               // idle: the window closes
    h.Sample(at + end - 50 * kMs, 2 * kMiB, 5000000);  // a new one opens
    h.Sample(at + end, 2 * kMiB, 5000000 + 15000000);  // 300 MB/s
    const double expect = end < 200 * kMs ? 2e8 : 3e8;
    EXPECT_DOUBLE_EQ(h.Throughput(at + end, 1000 * kMs), expect) << "sample ending " << end / kMs << " ms later";
  }
}

TEST(RailHealthTest, ThroughputIsZeroOnceOlderThanAsked) {
  RailHealth h(2000 * kMs, 5000 * kMs);
  FirstSample(&h);
  const int64_t at = kT0 + 50 * kMs;
  EXPECT_DOUBLE_EQ(h.Throughput(at + 500 * kMs, 500 * kMs), 1e8);
  EXPECT_EQ(h.Throughput(at + 500 * kMs + 1, 500 * kMs), 0.0);
}

TEST(RailHealthTest, StallsAfterTheStallPeriodWithWorkInFlightAndNothingCompleting) {
  RailHealth h(2000 * kMs, 5000 * kMs);
  h.WorkStarted(kT0);
  EXPECT_FALSE(h.CheckStall(kT0 + 1999 * kMs, true));
  EXPECT_TRUE(h.InService(kT0 + 1999 * kMs, 1));
  // Nothing in flight: never a stall, however long.
  EXPECT_FALSE(h.CheckStall(kT0 + 10000 * kMs, false));
  EXPECT_TRUE(h.CheckStall(kT0 + 2000 * kMs, true));
  EXPECT_FALSE(h.InService(kT0 + 2000 * kMs, 0));
  // The next stall is one stall period away.
  EXPECT_FALSE(h.CheckStall(kT0 + 2001 * kMs, true));
  EXPECT_TRUE(h.CheckStall(kT0 + 4000 * kMs, true));
}

TEST(RailHealthTest, AStallDueCanBeExcusedAndTheRailStaysInService) {
  RailHealth h(2000 * kMs, 5000 * kMs);
  h.WorkStarted(kT0);
  EXPECT_FALSE(h.StallDue(kT0 + 1999 * kMs));
  EXPECT_TRUE(h.StallDue(kT0 + 2000 * kMs));
  // The work that waited was not the rail's: no stall, and the clock restarts.
  h.Excused(kT0 + 2000 * kMs);
  EXPECT_EQ(h.last_completed_ns(), 0) << "an excuse is no completion";
  EXPECT_FALSE(h.StallDue(kT0 + 2001 * kMs));
  EXPECT_FALSE(h.CheckStall(kT0 + 3999 * kMs, true));
  EXPECT_TRUE(h.InService(kT0 + 3999 * kMs, 1));
  EXPECT_TRUE(h.CheckStall(kT0 + 4000 * kMs, true));
  RailHealth never(0, 5000 * kMs);
  EXPECT_FALSE(never.StallDue(kT0 + 100000 * kMs));
}

TEST(RailHealthTest, AStallIsThePeersOnlyWhenTheRailCompletedWorkSinceTheirRefusalsBegan) {
  const int64_t refused = kT0 + 100 * kMs;
  EXPECT_TRUE(StallIsThePeers(false, true, refused, refused + 1)) << "another peer's operation completed since";
  EXPECT_FALSE(StallIsThePeers(false, true, refused, refused)) << "nothing completed since: the link";
  EXPECT_FALSE(StallIsThePeers(false, true, refused, 0)) << "nothing ever completed";
  EXPECT_FALSE(StallIsThePeers(false, true, 0, refused)) << "some waiting peer is not refused";
  EXPECT_FALSE(StallIsThePeers(true, true, refused, refused + 1)) << "work in flight stalls as always";
  EXPECT_FALSE(StallIsThePeers(false, false, refused, refused + 1)) << "nothing waits: nothing to excuse";
}

TEST(RailHealthTest, CompletionsRestartTheStallClock) {
  RailHealth h(2000 * kMs, 5000 * kMs);
  h.WorkStarted(kT0);
  EXPECT_FALSE(h.Completed(kT0 + 1500 * kMs));  // was in service: nothing to say
  EXPECT_EQ(h.last_completed_ns(), kT0 + 1500 * kMs);
  EXPECT_FALSE(h.CheckStall(kT0 + 3499 * kMs, true));
  EXPECT_TRUE(h.CheckStall(kT0 + 3500 * kMs, true));
}

TEST(RailHealthTest, ZeroStallPeriodNeverStalls) {
  RailHealth h(0, 5000 * kMs);
  h.WorkStarted(kT0);
  EXPECT_FALSE(h.CheckStall(kT0 + 3600000 * kMs, true));
  EXPECT_TRUE(h.InService(kT0 + 3600000 * kMs, 1));
}

TEST(RailHealthTest, OutOfServiceUntilTheRetryPeriodThenOnProbationWhileIdle) {
  RailHealth h(2000 * kMs, 5000 * kMs);
  h.WorkStarted(kT0);
  ASSERT_TRUE(h.CheckStall(kT0 + 2000 * kMs, true));
  const int64_t back = kT0 + 7000 * kMs;
  EXPECT_FALSE(h.InService(back - 1, 0));
  // Probation: it takes new work only while it has none.
  EXPECT_TRUE(h.InService(back, 0));
  EXPECT_FALSE(h.InService(back, 1));
  EXPECT_FALSE(h.InService(back + 60000 * kMs, 1));
  // The first completion puts it back in service, loaded or not.
  EXPECT_TRUE(h.Completed(back + 100 * kMs));
  EXPECT_TRUE(h.InService(back + 100 * kMs, 8 * kMiB));
  EXPECT_FALSE(h.Completed(back + 200 * kMs));
}

TEST(RailHealthTest, ACompletionDuringTheRetryPeriodEndsItAtOnce) {
  RailHealth h(2000 * kMs, 5000 * kMs);
  h.WorkStarted(kT0);
  ASSERT_TRUE(h.CheckStall(kT0 + 2000 * kMs, true));
  EXPECT_TRUE(h.Completed(kT0 + 2500 * kMs));
  EXPECT_TRUE(h.InService(kT0 + 2500 * kMs, 1));
}

// A stalled rail closes a peer's connection only where it may and when
// every operation posted to that peer can move; where it may not close
// connections, it offers each operation to its owner instead.
TEST(ActionOnStalledPeer, CutOnlyWhenAllowedAndEveryOperationMoves) {
  EXPECT_EQ(ActionOnStalledPeer(true, true), StalledPeerAction::kCut);
  EXPECT_EQ(ActionOnStalledPeer(true, false), StalledPeerAction::kLeave);
  EXPECT_EQ(ActionOnStalledPeer(false, true), StalledPeerAction::kOffer);
  EXPECT_EQ(ActionOnStalledPeer(false, false), StalledPeerAction::kOffer);
}

}  // namespace
}  // namespace kvfabric::fabric
