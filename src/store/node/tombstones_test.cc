#include "store/node/tombstones.h"

#include <gtest/gtest.h>

#include <string>

namespace kvfabric::store {
namespace {

using std::chrono::milliseconds;

TEST(TombstonesTest, AKeyIsRememberedForTheWindowAfterItsLastRemoval) {
  Tombstones t(milliseconds(100), 16);
  const auto t0 = Tombstones::Clock::now();
  EXPECT_FALSE(t.Has("k", t0));
  t.Add("k", t0);
  EXPECT_TRUE(t.Has("k", t0 + milliseconds(99)));
  EXPECT_FALSE(t.Has("k", t0 + milliseconds(100)));
  t.Add("k", t0 + milliseconds(80));  // removed again: counted from then
  t.Add("other", t0 + milliseconds(150));  // expires the first removal, not the second
  EXPECT_TRUE(t.Has("k", t0 + milliseconds(150)));
  EXPECT_FALSE(t.Has("k", t0 + milliseconds(180)));
  EXPECT_EQ(t.size(), 2u);
}

TEST(TombstonesTest, AtMostMaxKeysAreKeptTheOldestGoingFirst) {
  Tombstones t(milliseconds(10000), 4);
  const auto t0 = Tombstones::Clock::now();
  for (int i = 0; i < 10; ++i) t.Add("k" + std::to_string(i), t0 + milliseconds(i));
  EXPECT_EQ(t.size(), 4u);
  for (int i = 0; i < 6; ++i) EXPECT_FALSE(t.Has("k" + std::to_string(i), t0 + milliseconds(10))) << i;
  for (int i = 6; i < 10; ++i) EXPECT_TRUE(t.Has("k" + std::to_string(i), t0 + milliseconds(10))) << i;
  // The same key removed over and over holds one place, and the queue stays bounded.
  for (int i = 0; i < 1000; ++i) t.Add("hot", t0 + milliseconds(20 + i));
  EXPECT_TRUE(t.Has("hot", t0 + milliseconds(1020)));
  EXPECT_LE(t.size(), 4u);
}

}  // namespace
}  // namespace kvfabric::store
