#include "engine/slicing.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvfabric::engine {
namespace {

constexpr size_t KiB = 1024, MiB = 1024 * KiB;

struct Chunk {
  uint64_t addr;
  uint64_t length;
};

TEST(PlanPieces, AutoStripesFromTheThresholdAndPicksByLoad) {
  const PiecePlan small = PlanPieces(RailPolicy::kAuto, 64 * KiB, 4, 256 * KiB);
  EXPECT_EQ(small.piece, 64 * KiB);
  EXPECT_TRUE(small.by_load);
  EXPECT_EQ(small.up_front, 0u) << "whole: nothing left to pull";
  const PiecePlan large = PlanPieces(RailPolicy::kAuto, 16 * MiB, 4, 256 * KiB);
  EXPECT_EQ(large.piece, StripePieceBytes(16 * MiB, 4, 256 * KiB));
  EXPECT_TRUE(large.by_load);
  EXPECT_EQ(large.up_front, kPiecesInFlightPerRail * 4) << "16 pieces: 8 at once, the rest as rails free up";
  EXPECT_EQ(PlanPieces(RailPolicy::kAuto, 512 * KiB, 4, 256 * KiB).up_front, 0u) << "8 pieces: all at once";
  EXPECT_EQ(PlanPieces(RailPolicy::kSplit, 64 * MiB, 4, 0).up_front, 0u);
  EXPECT_EQ(PlanPieces(RailPolicy::kRoundRobin, 64 * MiB, 4, 0).up_front, 0u);
}

TEST(PlanPieces, LeastLoadedAndRoundRobinKeepRequestsWhole) {
  for (size_t len : {4 * KiB, 64 * MiB}) {
    const PiecePlan ll = PlanPieces(RailPolicy::kLeastLoaded, len, 4, 256 * KiB);
    EXPECT_EQ(ll.piece, len);
    EXPECT_TRUE(ll.by_load);
    const PiecePlan rr = PlanPieces(RailPolicy::kRoundRobin, len, 4, 256 * KiB);
    EXPECT_EQ(rr.piece, len);
    EXPECT_FALSE(rr.by_load) << "in turn, whatever the load";
  }
}

TEST(PlanPieces, SplitCutsOnePagedPiecePerRail) {
  const PiecePlan even = PlanPieces(RailPolicy::kSplit, 64 * MiB, 4, 256 * KiB);
  EXPECT_EQ(even.piece, 16 * MiB);
  EXPECT_FALSE(even.by_load);
  // 1 MiB + 1 over 4 rails: pieces rounded up to a page, the last shorter.
  EXPECT_EQ(PlanPieces(RailPolicy::kSplit, MiB + 1, 4, 0).piece, 256 * KiB + 4 * KiB);
  // Below a page per rail: fewer rails, never a piece under a page.
  EXPECT_EQ(PlanPieces(RailPolicy::kSplit, 6 * KiB, 4, 0).piece, 4 * KiB);
  EXPECT_EQ(PlanPieces(RailPolicy::kSplit, 100, 4, 0).piece, 100u);
  EXPECT_EQ(PlanPieces(RailPolicy::kSplit, 64 * MiB, 1, 0).piece, 64 * MiB) << "one rail: whole";
}

TEST(StripePieceBytes, NoStripingBelowThresholdOffOrOneRail) {
  EXPECT_EQ(StripePieceBytes(256 * KiB - 1, 4, 256 * KiB), 256 * KiB - 1);
  EXPECT_EQ(StripePieceBytes(64 * MiB, 4, 0), 64 * MiB);
  EXPECT_EQ(StripePieceBytes(64 * MiB, 1, 256 * KiB), 64 * MiB);
}

TEST(StripePieceBytes, AboutSixteenPiecesPerRail) {
  EXPECT_EQ(StripePieceBytes(64 * MiB, 4, 256 * KiB), 1 * MiB);
  EXPECT_EQ(StripePieceBytes(64 * MiB, 2, 256 * KiB), 2 * MiB);
}

TEST(StripePieceBytes, ClampedAndPageRounded) {
  // At the threshold: 256 KiB over 4 rails would be 16 KiB pieces; 64 KiB at least.
  EXPECT_EQ(StripePieceBytes(256 * KiB, 4, 256 * KiB), kMinPiece);
  // 1 GiB over 2 rails would be 128 MiB pieces; 8 MiB at most.
  EXPECT_EQ(StripePieceBytes(1024 * MiB, 2, 256 * KiB), kMaxPiece);
  // Uneven: rounded up to a whole page.
  const size_t p = StripePieceBytes(10 * MiB + 12345, 3, 256 * KiB);
  EXPECT_EQ(p % 4096, 0u);
  EXPECT_GE(p * 3 * kPiecesPerRail, 10 * MiB + 12345);
  EXPECT_LT(p, (10 * MiB + 12345) / (3 * kPiecesPerRail) + 4096);
}

TEST(ChunkIndexAt, FindsTheChunkHoldingTheAddress) {
  const std::vector<Chunk> c{{1000, 100}, {1100, 100}, {1200, 50}};
  EXPECT_EQ(ChunkIndexAt(c, 1000), 0u);
  EXPECT_EQ(ChunkIndexAt(c, 1099), 0u);
  EXPECT_EQ(ChunkIndexAt(c, 1100), 1u);
  EXPECT_EQ(ChunkIndexAt(c, 1249), 2u);
  const std::vector<Chunk> one{{5, 10}};
  EXPECT_EQ(ChunkIndexAt(one, 14), 0u);
}

std::vector<Cut> CutAll(const std::vector<Chunk>& l, const std::vector<Chunk>& r, uint64_t la, uint64_t ra,
                        size_t len, size_t max_msg) {
  std::vector<Cut> out;
  CutAtChunks(l, r, la, ra, len, max_msg, &out);
  return out;
}

TEST(CutAtChunks, OneSliceWhenNothingLimits) {
  auto cuts = CutAll({{0, MiB}}, {{1 << 20, MiB}}, 4096, (1 << 20) + 8192, 64 * KiB, MiB);
  ASSERT_EQ(cuts.size(), 1u);
  EXPECT_EQ(cuts[0].local, 4096u);
  EXPECT_EQ(cuts[0].remote, (1u << 20) + 8192);
  EXPECT_EQ(cuts[0].length, 64 * KiB);
}

TEST(CutAtChunks, MaxMessageSize) {
  auto cuts = CutAll({{0, 16 * MiB}}, {{0, 16 * MiB}}, 0, 0, 10 * MiB, 4 * MiB);
  ASSERT_EQ(cuts.size(), 3u);
  EXPECT_EQ(cuts[0].length, 4 * MiB);
  EXPECT_EQ(cuts[1].length, 4 * MiB);
  EXPECT_EQ(cuts[2].length, 2 * MiB);
  EXPECT_EQ(cuts[2].local, 8 * MiB);
  EXPECT_EQ(cuts[2].remote, 8 * MiB);
}

TEST(CutAtChunks, NeverCrossesAChunkEdgeOnEitherSide) {
  // Local chunks of 3 MiB, remote chunks of 2 MiB, misaligned by 512 KiB.
  std::vector<Chunk> local, remote;
  for (uint64_t a = 0; a < 12 * MiB; a += 3 * MiB) local.push_back({a, 3 * MiB});
  for (uint64_t a = 0x100000000; a < 0x100000000 + 12 * MiB; a += 2 * MiB) remote.push_back({a, 2 * MiB});
  const uint64_t la = 512 * KiB, ra = 0x100000000 + KiB;
  const size_t len = 10 * MiB;
  auto cuts = CutAll(local, remote, la, ra, len, 8 * MiB);
  uint64_t l = la, r = ra;
  size_t total = 0;
  for (const Cut& c : cuts) {
    EXPECT_EQ(c.local, l);
    EXPECT_EQ(c.remote, r);
    const Chunk& lc = local[c.local_chunk];
    const Chunk& rc = remote[c.remote_chunk];
    EXPECT_GE(c.local, lc.addr);
    EXPECT_LE(c.local + c.length, lc.addr + lc.length);
    EXPECT_GE(c.remote, rc.addr);
    EXPECT_LE(c.remote + c.length, rc.addr + rc.length);
    // As long as the limits allow: every cut ends at an edge or the end.
    const bool at_edge = c.local + c.length == lc.addr + lc.length || c.remote + c.length == rc.addr + rc.length ||
                         total + c.length == len;
    EXPECT_TRUE(at_edge) << "cut at " << c.local;
    l += c.length;
    r += c.length;
    total += c.length;
  }
  EXPECT_EQ(total, len);
  // Edges inside the range: local at 3, 6, 9 MiB; remote at 2-ish, 4, 6, 8, 10 MiB.
  EXPECT_EQ(cuts.size(), 9u);
}

TEST(CutAtChunks, ZeroLengthCutsNothing) {
  EXPECT_TRUE(CutAll({{0, 10}}, {{0, 10}}, 0, 0, 0, 4).empty());
}

}  // namespace
}  // namespace kvfabric::engine
