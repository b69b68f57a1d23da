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
