#include "engine/rail_choice.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvfabric::engine {
namespace {

constexpr double kGbit = 125e6;  // bytes/s

std::vector<size_t> Candidates(const std::vector<size_t>& usable, const RailView* views, int exclude = -1,
                               bool fallback = true) {
  size_t out[kMaxLocalRails];
  const size_t n = CandidateRails(usable, views, exclude, fallback, out);
  return {out, out + n};
}

TEST(CandidateRails, AllServingRailsInUsableOrder) {
  RailView v[4];
  EXPECT_EQ(Candidates({2, 0, 3}, v), (std::vector<size_t>{2, 0, 3}));
}

TEST(CandidateRails, NearRailsAloneWhileAnyServes) {
  RailView v[4];
  v[0].near = v[1].near = false;
  EXPECT_EQ(Candidates({0, 1, 2, 3}, v), (std::vector<size_t>{2, 3}));
  v[2].in_service = false;
  EXPECT_EQ(Candidates({0, 1, 2, 3}, v), (std::vector<size_t>{3}));
  // No near rail serves: the far ones take the work.
  v[3].up_for_peer = false;
  EXPECT_EQ(Candidates({0, 1, 2, 3}, v), (std::vector<size_t>{0, 1}));
}

TEST(CandidateRails, OutOfServiceAndDownForPeerAreSkipped) {
  RailView v[3];
  v[0].in_service = false;
  v[1].up_for_peer = false;
  EXPECT_EQ(Candidates({0, 1, 2}, v), (std::vector<size_t>{2}));
}

TEST(CandidateRails, FallbackTakesEveryUsableRailButTheExcluded) {
  RailView v[3];
  for (auto& x : v) x.in_service = false;
  EXPECT_EQ(Candidates({0, 1, 2}, v, /*exclude=*/1, /*fallback=*/true), (std::vector<size_t>{0, 2}));
  EXPECT_TRUE(Candidates({0, 1, 2}, v, /*exclude=*/1, /*fallback=*/false).empty());
}

TEST(CandidateRails, ExcludedRailNeverChosen) {
  RailView v[2];
  EXPECT_EQ(Candidates({0, 1}, v, /*exclude=*/0, /*fallback=*/false), (std::vector<size_t>{1}));
  EXPECT_TRUE(Candidates({0}, v, /*exclude=*/0, /*fallback=*/true).empty());
}

TEST(PickRail, LeastLoadedOnEvenRails) {
  RailView v[3];
  v[0].load_bytes = 3 << 20;
  v[1].load_bytes = 1 << 20;
  v[2].load_bytes = 2 << 20;
  const size_t cand[] = {0, 1, 2};
  const uint64_t planned[3] = {};
  EXPECT_EQ(PickRail(cand, v, 4096, planned), 1u);
}

// Ties go to the first tied candidate from cand[first % n] on; the load
// still decides before the order does.
TEST(PickRail, TiesGoFromTheRotatingFirstCandidate) {
  RailView v[4];
  const size_t cand[] = {0, 1, 2, 3};
  const uint64_t planned[4] = {};
  for (size_t first = 0; first < 8; ++first) EXPECT_EQ(PickRail(cand, v, 4096, planned, first), first % 4);
  v[2].load_bytes = 1;  // rail 2 is no longer tied: the order skips it
  EXPECT_EQ(PickRail(cand, v, 4096, planned, 2), 3u);
  v[0].load_bytes = v[1].load_bytes = v[3].load_bytes = 5;  // rail 2 is the least loaded now, wherever the order starts
  for (size_t first = 0; first < 4; ++first) EXPECT_EQ(PickRail(cand, v, 4096, planned, first), 2u);
}

// The homes of a store PUT each read a few pages from the same writer at
// once. With ties to the lowest rail, 11 pages over 4 even rails from each
// of 3 readers leave rail 3 with 6 pages against 9 on the others (the
// batch waits for the fullest); rotating the first candidate per request
// from a different start in each reader spreads them.
TEST(PickRail, IndependentReadersRotatingTheirFirstLoadTheRailsEvenly) {
  const size_t cand[] = {0, 1, 2, 3};
  const uint64_t none[4] = {};
  uint64_t lowest_first[4] = {}, rotated[4] = {};
  size_t rotation[3] = {0, 5, 10};  // each reader's counter: different starts
  for (int batch = 0; batch < 12; ++batch) {
    for (int reader = 0; reader < 3; ++reader) {
      RailView a[4], b[4];  // a reader sees only its own load
      for (int page = 0; page < 11; ++page) {
        const size_t x = PickRail(cand, a, 1, none);
        a[x].load_bytes += 1;
        ++lowest_first[x];
        const size_t y = PickRail(cand, b, 1, none, rotation[reader]++);
        b[y].load_bytes += 1;
        ++rotated[y];
      }
    }
  }
  EXPECT_EQ(lowest_first[3], 12u * 3 * 2) << "ties to the lowest rail leave rail 3 short";
  EXPECT_EQ(lowest_first[0], 12u * 3 * 3);
  for (int r = 0; r < 4; ++r) EXPECT_NEAR(static_cast<double>(rotated[r]), 12 * 33 / 4.0, 12 * 33 * 0.05) << "rail " << r;
}

TEST(PickRail, PlannedBytesOfThisRequestCount) {
  RailView v[2];
  const size_t cand[] = {0, 1};
  uint64_t planned[2] = {};
  std::vector<size_t> picks;
  for (int i = 0; i < 8; ++i) {
    const size_t r = PickRail(cand, v, 1 << 20, planned);
    planned[r] += 1 << 20;
    picks.push_back(r);
  }
  // Alternates: each piece goes where less is waiting; ties to the first.
  EXPECT_EQ(picks, (std::vector<size_t>{0, 1, 0, 1, 0, 1, 0, 1}));
}

TEST(PickRail, EvenSpeedsDoNotCountOnlyBytesDo) {
  // Measured within 30% of each other: noise, so the bytes decide.
  RailView v[2];
  v[0].speed = 2.0 * kGbit;
  v[1].speed = 1.6 * kGbit;
  v[0].load_bytes = 2 << 20;
  v[1].load_bytes = 1 << 20;
  const size_t cand[] = {0, 1};
  const uint64_t planned[2] = {};
  EXPECT_EQ(PickRail(cand, v, 1 << 20, planned), 1u);
}

TEST(PickRail, UnevenSpeedsDivideTheWork) {
  // Rails of 2, 2, 2 and 1 Gbit/s: over many pieces, the slow rail takes
  // about half the share of each fast one.
  RailView v[4];
  for (auto& x : v) x.speed = 2 * kGbit;
  v[3].speed = 1 * kGbit;
  const size_t cand[] = {0, 1, 2, 3};
  uint64_t planned[4] = {};
  for (int i = 0; i < 70; ++i) planned[PickRail(cand, v, 1 << 20, planned)] += 1 << 20;
  EXPECT_EQ(planned[0], 20u << 20);
  EXPECT_EQ(planned[1], 20u << 20);
  EXPECT_EQ(planned[2], 20u << 20);
  EXPECT_EQ(planned[3], 10u << 20);
}

TEST(PickRail, AnUnmeasuredRailTurnsSpeedsOff) {
  RailView v[2];
  v[0].speed = 10 * kGbit;
  v[1].speed = 0;  // not measured lately
  v[0].load_bytes = 2 << 20;
  const size_t cand[] = {0, 1};
  const uint64_t planned[2] = {};
  EXPECT_EQ(PickRail(cand, v, 1 << 20, planned), 1u);
}

TEST(PickRail, OneCandidateIsTheAnswer) {
  RailView v[6];
  v[5].load_bytes = 1ull << 40;
  const size_t cand[] = {5};
  const uint64_t planned[6] = {};
  EXPECT_EQ(PickRail(cand, v, 1, planned), 5u);
}

}  // namespace
}  // namespace kvfabric::engine

namespace kvfabric::engine {
namespace {

TEST(PairedRailsTest, RailsWhereBothEndsHoldTheMemory) {
  PairView pairs[kMaxLocalRails];
  pairs[0] = {true, false, 2};   // registered here, reaches peer rail 2 which has the key
  pairs[1] = {true, false, -1};  // no peer rail with the key
  pairs[2] = {false, false, 0};  // the local memory is not registered here
  pairs[3] = {true, false, 3};
  const size_t rails[] = {0, 1, 2, 3};
  size_t out[4];
  ASSERT_EQ(PairedRails(rails, pairs, out), 2u);
  EXPECT_EQ(out[0], 0u);
  EXPECT_EQ(out[1], 3u);
}

TEST(PairedRailsTest, StagingOnlyWhenNothingMovesTheMemoryInPlace) {
  PairView pairs[kMaxLocalRails];
  pairs[0] = {false, true, 0};  // GPU memory this rail would stage
  pairs[1] = {true, false, 1};  // registered in place
  const size_t rails[] = {0, 1};
  size_t out[2];
  ASSERT_EQ(PairedRails(rails, pairs, out), 1u);
  EXPECT_EQ(out[0], 1u);
  pairs[1].peer_rail = -1;  // the in-place rail reaches no key: stage on rail 0
  ASSERT_EQ(PairedRails(rails, pairs, out), 1u);
  EXPECT_EQ(out[0], 0u);
  pairs[0].peer_rail = -1;
  EXPECT_EQ(PairedRails(rails, pairs, out), 0u);
}

}  // namespace
}  // namespace kvfabric::engine
