#include "store/client/location_cache.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace kvfabric::store {
namespace {

CachedLocation At(uint64_t addr, uint64_t generation = 1, std::string node = "10.0.0.1:7400", uint64_t epoch = 9) {
  Location where;
  where.found = true;
  where.addr = addr;
  where.length = 4096;
  where.generation = generation;
  where.checksum = Checksum{addr * 3, generation};
  return CachedLocation{std::move(node), epoch, where};
}

TEST(LocationCacheTest, FindsWhatWasPutAndForgetsWhatWasErased) {
  LocationCache cache(8);
  CachedLocation out;
  EXPECT_FALSE(cache.Find("a", &out));
  cache.Put("a", At(100));
  cache.Put("b", At(200));
  ASSERT_TRUE(cache.Find("a", &out));
  EXPECT_EQ(out.where, At(100).where);
  EXPECT_EQ(out.node, "10.0.0.1:7400");
  cache.Put("a", At(300, 2));  // a newer answer replaces the entry
  ASSERT_TRUE(cache.Find("a", &out));
  EXPECT_EQ(out.where.addr, 300u);
  EXPECT_EQ(out.where.generation, 2u);
  EXPECT_EQ(cache.size(), 2u);
  cache.Erase("a");
  EXPECT_FALSE(cache.Find("a", &out));
  cache.Erase("never-there");
  EXPECT_TRUE(cache.Find("b", &out));
  cache.Clear();
  EXPECT_FALSE(cache.Find("b", &out));
  EXPECT_EQ(cache.size(), 0u);
}

TEST(LocationCacheTest, DropsTheLeastRecentlyUsedWhenFull) {
  LocationCache cache(3);
  cache.Put("a", At(1));
  cache.Put("b", At(2));
  cache.Put("c", At(3));
  CachedLocation out;
  ASSERT_TRUE(cache.Find("a", &out));  // a is now the most recent: b is the oldest
  cache.Put("d", At(4));
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_FALSE(cache.Find("b", &out));
  EXPECT_TRUE(cache.Find("a", &out));
  EXPECT_TRUE(cache.Find("c", &out));
  EXPECT_TRUE(cache.Find("d", &out));
  // Recency now, oldest first: a, c, d. Replacing a makes it the most recent.
  cache.Put("a", At(10));
  cache.Put("e", At(5));  // c is the oldest: dropped
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_FALSE(cache.Find("c", &out));
  EXPECT_TRUE(cache.Find("a", &out));
  EXPECT_EQ(out.where.addr, 10u);
  EXPECT_TRUE(cache.Find("d", &out));
  EXPECT_TRUE(cache.Find("e", &out));
}

TEST(LocationCacheTest, ZeroCapacityKeepsNothing) {
  LocationCache cache(0);
  cache.Put("a", At(1));
  CachedLocation out;
  EXPECT_FALSE(cache.Find("a", &out));
  EXPECT_EQ(cache.size(), 0u);
}

// Large caches are sharded: the bound holds to within the rounding of a
// sixteenth, and the entries kept are the most recent of their shard.
TEST(LocationCacheTest, ShardedCacheStaysNearItsCapacity) {
  LocationCache cache(4096);
  for (int i = 0; i < 100000; ++i) cache.Put("key-" + std::to_string(i), At(i));
  EXPECT_LE(cache.size(), 4096u + 15);
  EXPECT_GE(cache.size(), 4096u - 16 * 64) << "every shard should be close to full with uniform keys";
  CachedLocation out;
  EXPECT_TRUE(cache.Find("key-99999", &out));
  EXPECT_EQ(out.where.addr, 99999u);
  EXPECT_FALSE(cache.Find("key-0", &out));
}

// A model check: random puts, finds and erases against a map with an exact
// LRU, on a one-shard cache (capacity under 1024), so the two agree exactly.
TEST(LocationCacheTest, AgreesWithAModel) {
  constexpr size_t kCapacity = 50;
  LocationCache cache(kCapacity);
  std::unordered_map<std::string, uint64_t> model;  // key -> addr
  std::vector<std::string> recency;                 // most recent last
  auto touch = [&](const std::string& k) {
    std::erase(recency, k);
    recency.push_back(k);
  };
  std::mt19937_64 rng(7);
  for (int step = 0; step < 100000; ++step) {
    const std::string k = "k" + std::to_string(rng() % 120);
    const int what = static_cast<int>(rng() % 10);
    CachedLocation out;
    if (what < 4) {
      const uint64_t addr = rng();
      cache.Put(k, At(addr));
      if (!model.count(k) && model.size() == kCapacity) {
        model.erase(recency.front());
        recency.erase(recency.begin());
      }
      model[k] = addr;
      touch(k);
    } else if (what < 9) {
      const bool found = cache.Find(k, &out);
      ASSERT_EQ(found, model.count(k) == 1) << "step " << step << " key " << k;
      if (found) {
        ASSERT_EQ(out.where.addr, model[k]);
        touch(k);
      }
    } else {
      cache.Erase(k);
      model.erase(k);
      std::erase(recency, k);
    }
    ASSERT_EQ(cache.size(), model.size());
  }
}

TEST(LocationCacheTest, ThreadsShareIt) {
  LocationCache cache(8192);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&cache, t] {
      CachedLocation out;
      for (int i = 0; i < 20000; ++i) {
        const std::string k = "k" + std::to_string((i * 7 + t) % 3000);
        cache.Put(k, At(i));
        if (cache.Find(k, &out)) {
          EXPECT_EQ(out.node, "10.0.0.1:7400");
        }
        if (i % 11 == 0) cache.Erase(k);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_LE(cache.size(), 3000u);
}

// The rule for reading a remembered location before the lookup answers.
TEST(LocationCacheTest, UsableOnlyFromTheSameMemberAndEpochIntoRoomEnough) {
  const CachedLocation c = At(100);  // 4096 bytes, node 10.0.0.1:7400, epoch 9
  EXPECT_TRUE(CachedLocationUsable(c, "10.0.0.1:7400", 9, 4096));
  EXPECT_TRUE(CachedLocationUsable(c, "10.0.0.1:7400", 9, 1 << 20));
  EXPECT_FALSE(CachedLocationUsable(c, "10.0.0.1:7400", 9, 4095)) << "buffers too small";
  EXPECT_FALSE(CachedLocationUsable(c, "10.0.0.2:7400", 9, 4096)) << "the key's home is another member now";
  EXPECT_FALSE(CachedLocationUsable(c, "10.0.0.1:7400", 10, 4096)) << "the member restarted: its pool is new";
  CachedLocation absent = c;
  absent.where.found = false;
  EXPECT_FALSE(CachedLocationUsable(absent, "10.0.0.1:7400", 9, 4096));
}

}  // namespace
}  // namespace kvfabric::store
