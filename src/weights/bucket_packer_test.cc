#include "weights/bucket_packer.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace kvfabric::weights {
namespace {

TEST(BucketPackerTest, SmallTensorsShareABucketEachAtAnAlignedOffset) {
  BucketPacker p(1000, 64);
  EXPECT_EQ(p.Add(10), (std::vector<Piece>{{0, 0, 0, 0, 10}}));
  EXPECT_EQ(p.Add(100), (std::vector<Piece>{{1, 0, 0, 64, 100}}));
  EXPECT_EQ(p.Add(3), (std::vector<Piece>{{2, 0, 0, 192, 3}}));
  EXPECT_EQ(p.sealed(), 0u);
  EXPECT_EQ(p.buckets(), 1u);
  EXPECT_EQ(p.used(0), 195u);
}

TEST(BucketPackerTest, ATensorThatFitsOnlyInABucketOfItsOwnStartsTheNext) {
  BucketPacker p(1000, 64);
  p.Add(900);
  EXPECT_EQ(p.Add(200), (std::vector<Piece>{{1, 0, 1, 0, 200}}));
  EXPECT_EQ(p.sealed(), 1u);
  EXPECT_EQ(p.used(0), 900u);
  EXPECT_EQ(p.Add(1000), (std::vector<Piece>{{2, 0, 2, 0, 1000}})) << "a whole bucket's worth";
  EXPECT_EQ(p.sealed(), 3u) << "a full bucket takes nothing more";
  EXPECT_EQ(p.Add(1), (std::vector<Piece>{{3, 0, 3, 0, 1}}));
}

TEST(BucketPackerTest, ATensorLargerThanABucketFillsBucketsFromTheFreeSpaceOn) {
  BucketPacker p(1000, 64);
  p.Add(100);
  EXPECT_EQ(p.Add(2500), (std::vector<Piece>{{1, 0, 0, 128, 872}, {1, 872, 1, 0, 1000}, {1, 1872, 2, 0, 628}}));
  EXPECT_EQ(p.sealed(), 2u);
  EXPECT_EQ(p.Add(10), (std::vector<Piece>{{2, 0, 2, 640, 10}})) << "room behind its last piece";
  EXPECT_EQ(p.buckets(), 3u);
}

TEST(BucketPackerTest, EmptyTensorsNeedNoBytes) {
  BucketPacker p(1000, 64);
  EXPECT_EQ(p.Add(0), (std::vector<Piece>{{0, 0, 0, 0, 0}}));
  EXPECT_EQ(p.buckets(), 0u) << "nothing to send yet";
  p.Add(1000);
  EXPECT_EQ(p.Add(0), (std::vector<Piece>{{2, 0, 0, 1000, 0}}));
  EXPECT_EQ(p.buckets(), 1u);
}

// Random sizes: the pieces cover every tensor once, never overlap, start
// aligned, end inside their bucket, and buckets are used in order.
TEST(BucketPackerTest, EveryLayoutCoversEachTensorOnceWithoutOverlap) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 100; ++round) {
    const uint64_t bucket = 256 + rng() % 8192;
    const uint64_t align = uint64_t{1} << (rng() % 8);
    BucketPacker p(bucket, align);
    std::map<size_t, std::vector<std::pair<uint64_t, uint64_t>>> taken;  // bucket -> [begin, end)
    size_t last_bucket = 0;
    for (size_t t = 0; t < 40; ++t) {
      const uint64_t bytes = rng() % 4 == 0 ? rng() % (3 * bucket) : rng() % (bucket / 4 + 1);
      const std::vector<Piece> pieces = p.Add(bytes);
      ASSERT_FALSE(pieces.empty());
      uint64_t covered = 0;
      for (size_t i = 0; i < pieces.size(); ++i) {
        const Piece& x = pieces[i];
        EXPECT_EQ(x.tensor, t);
        EXPECT_EQ(x.tensor_offset, covered);
        EXPECT_LE(x.bucket_offset + x.length, bucket);
        EXPECT_GE(x.bucket, last_bucket);
        if (i == 0 && x.length > 0) {
          EXPECT_EQ(x.bucket_offset % align, 0u);
        }
        if (i > 0) {
          EXPECT_EQ(x.bucket_offset, 0u) << "a tensor's later pieces open their buckets";
        }
        last_bucket = x.bucket;
        if (x.length > 0) {
          for (const auto& [b, e] : taken[x.bucket])
            EXPECT_TRUE(x.bucket_offset >= e || x.bucket_offset + x.length <= b);
          taken[x.bucket].push_back({x.bucket_offset, x.bucket_offset + x.length});
        }
        covered += x.length;
      }
      EXPECT_EQ(covered, bytes);
      if (bytes <= bucket && bytes > 0) {
        EXPECT_EQ(pieces.size(), 1u) << "what fits a bucket lies whole in one";
      }
    }
    EXPECT_EQ(p.buckets(), taken.empty() ? 0 : taken.rbegin()->first + 1);
  }
}

}  // namespace
}  // namespace kvfabric::weights
