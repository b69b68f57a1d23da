#include "store/node/pool_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <vector>

namespace kvfabric::store {
namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;

TEST(PoolAllocatorTest, AllocatesAlignedAndMergesWhatIsFreed) {
  PoolAllocator p(10 * MiB + 123);
  EXPECT_EQ(p.pool_bytes(), 10 * MiB);
  auto a = p.Allocate(1), b = p.Allocate(5000), c = p.Allocate(MiB);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 4096u);
  EXPECT_EQ(*c, 3 * 4096u);
  EXPECT_EQ(p.free_bytes(), 10 * MiB - 3 * 4096 - MiB);
  EXPECT_FALSE(p.Allocate(0));
  EXPECT_FALSE(p.Allocate(11 * MiB));
  EXPECT_TRUE(p.Free(*b));
  EXPECT_FALSE(p.Free(*b));    // twice
  EXPECT_FALSE(p.Free(12345));  // never allocated
  EXPECT_EQ(p.free_extents(), 2u);
  EXPECT_TRUE(p.Free(*a));
  EXPECT_TRUE(p.Free(*c));
  EXPECT_EQ(p.free_extents(), 1u);
  EXPECT_EQ(p.largest_free(), 10 * MiB);
  EXPECT_EQ(p.allocations(), 0u);
}

TEST(PoolAllocatorTest, BestFitTakesTheSmallestHoleThatFits) {
  PoolAllocator p(MiB);
  std::vector<uint64_t> at;
  for (int i = 0; i < 8; ++i) at.push_back(*p.Allocate(64 * KiB));
  ASSERT_TRUE(p.Free(at[1]));                              // a 64 KiB hole
  ASSERT_TRUE(p.Free(at[4]) && p.Free(at[5]));             // a 128 KiB hole
  EXPECT_EQ(*p.Allocate(60 * KiB), at[1]);                 // the smaller hole
  EXPECT_EQ(*p.Allocate(100 * KiB), at[4]);
}

TEST(PoolAllocatorTest, ClaimTakesBackAFreedExtent) {
  PoolAllocator p(MiB);
  std::vector<uint64_t> at;
  for (int i = 0; i < 4; ++i) at.push_back(*p.Allocate(64 * KiB));
  ASSERT_TRUE(p.Free(at[1]) && p.Free(at[2]));  // one free extent 64 KiB - 192 KiB, and the tail
  EXPECT_FALSE(p.Claim(at[0], 4096)) << "allocated";
  EXPECT_FALSE(p.Claim(at[1] + 1, 4096)) << "unaligned";
  EXPECT_FALSE(p.Claim(at[2], 65 * KiB)) << "runs into at[3]";
  EXPECT_FALSE(p.Claim(2 * MiB, 4096)) << "outside the pool";
  EXPECT_FALSE(p.Claim(at[1], 0));
  EXPECT_TRUE(p.Claim(at[2], 64 * KiB));
  EXPECT_EQ(p.free_extents(), 2u);
  EXPECT_EQ(p.largest_free(), MiB - 4 * 64 * KiB);
  EXPECT_TRUE(p.Claim(at[1] + 4096, 4096));  // the middle of a free extent
  EXPECT_EQ(p.free_extents(), 3u);
  EXPECT_EQ(p.free_bytes(), MiB - 4 * 64 * KiB + 64 * KiB - 4096);
  EXPECT_TRUE(p.Free(at[1] + 4096));
  EXPECT_TRUE(p.Free(at[2]));
  EXPECT_EQ(p.free_extents(), 2u);
  EXPECT_EQ(p.allocations(), 2u);
}

// Random allocations and frees against a model: extents never overlap, stay
// inside the pool, and free plus allocated bytes always make the pool.
TEST(PoolAllocatorTest, RandomOperationsKeepEveryExtentApart) {
  PoolAllocator p(64 * MiB);
  std::mt19937_64 rng(7);
  std::map<uint64_t, uint64_t> live;  // offset -> extent bytes
  uint64_t used = 0;
  for (int op = 0; op < 200000; ++op) {
    if (live.empty() || rng() % 3 != 0) {
      const uint64_t want = 1 + rng() % (2 * MiB);
      auto at = p.Allocate(want);
      if (!at) continue;
      const uint64_t bytes = p.ExtentBytes(want);
      ASSERT_EQ(*at % 4096, 0u);
      ASSERT_LE(*at + bytes, p.pool_bytes());
      auto next = live.lower_bound(*at);
      ASSERT_TRUE(next == live.end() || next->first >= *at + bytes) << "overlaps the next extent";
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second, *at) << "overlaps the previous extent";
      }
      live.emplace(*at, bytes);
      used += bytes;
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      ASSERT_TRUE(p.Free(it->first));
      used -= it->second;
      live.erase(it);
    }
    ASSERT_EQ(p.free_bytes() + used, p.pool_bytes());
  }
}

// How full a pool gets before an allocation fails, under churn: fill until
// one fails, give back part of what is live (at random, as removals do, or
// oldest first, as LRU eviction does), fill again. The figure is the bytes
// the pages asked for over the pool, at each failure after the first ten.
double UtilizationUnderChurn(const std::function<uint64_t(std::mt19937_64&)>& page_size, bool oldest_first) {
  const uint64_t pool = 256 * MiB;
  PoolAllocator p(pool);
  std::mt19937_64 rng(11);
  std::deque<std::pair<uint64_t, uint64_t>> live;  // offset, bytes asked, in allocation order
  uint64_t asked = 0;
  std::vector<double> at_failure;
  for (int round = 0; round < 60; ++round) {
    while (true) {
      const uint64_t want = page_size(rng);
      auto at = p.Allocate(want);
      if (!at) break;
      live.emplace_back(*at, want);
      asked += want;
    }
    if (round >= 10) at_failure.push_back(static_cast<double>(asked) / pool);
    const size_t give_back = live.size() * 3 / 10;
    for (size_t i = 0; i < give_back; ++i) {
      const size_t victim = oldest_first ? 0 : rng() % live.size();
      p.Free(live[victim].first);
      asked -= live[victim].second;
      live.erase(live.begin() + static_cast<long>(victim));
    }
  }
  std::sort(at_failure.begin(), at_failure.end());
  return at_failure.front();  // the worst
}

TEST(PoolAllocatorTest, MixedSizesStillFillThePool) {
  struct Workload {
    const char* name;
    std::function<uint64_t(std::mt19937_64&)> size;
  };
  const std::vector<Workload> workloads = {
      {"uniform 16 KiB - 1 MiB", [](std::mt19937_64& r) { return 16 * KiB + r() % (1008 * KiB); }},
      {"128 KiB and 2 MiB pages", [](std::mt19937_64& r) { return r() % 4 == 0 ? 2 * MiB : 128 * KiB; }},
      {"per-layer k+v of 3 models", [](std::mt19937_64& r) {
         const uint64_t sizes[] = {128 * KiB, 160 * KiB, 512 * KiB};
         return sizes[r() % 3];
       }},
      {"odd sizes 1 B - 4 MiB", [](std::mt19937_64& r) { return 1 + r() % (4 * MiB); }},
  };
  for (const auto& w : workloads)
    for (bool oldest_first : {false, true}) {
      const double worst = UtilizationUnderChurn(w.size, oldest_first);
      std::printf("pool allocator: %-28s %-13s: pages fill at least %.1f%% of the pool when one fails\n", w.name,
                  oldest_first ? "oldest first" : "at random", 100 * worst);
      EXPECT_GE(worst, 0.80) << w.name << (oldest_first ? ", oldest first" : ", at random");
    }
}

}  // namespace
}  // namespace kvfabric::store
