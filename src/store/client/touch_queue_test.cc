#include "store/client/touch_queue.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kvfabric::store {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(TouchQueue, KeysGoToTheirHomeAtMostEveryPeriod) {
  TouchQueue q;
  const auto t0 = Clock::now();
  EXPECT_EQ(q.Add("a:1", {"k1"}, t0), std::vector<std::string>{"k1"});  // the first goes at once
  EXPECT_TRUE(q.Add("a:1", {"k2", "k3"}, t0 + TouchQueue::kEvery / 2).empty());
  EXPECT_TRUE(q.Add("a:1", {"k2"}, t0 + TouchQueue::kEvery / 2).empty());  // queued once
  EXPECT_EQ(Sorted(q.Add("b:2", {"x"}, t0 + TouchQueue::kEvery / 2)), std::vector<std::string>{"x"});  // its own period
  EXPECT_EQ(Sorted(q.Add("a:1", {"k4"}, t0 + TouchQueue::kEvery)), (std::vector<std::string>{"k2", "k3", "k4"}));
  EXPECT_TRUE(q.Add("a:1", {}, t0 + TouchQueue::kEvery * 3).empty());  // nothing queued, nothing sent
}

TEST(TouchQueue, AHomeQueuesNoMoreThanItsBound) {
  TouchQueue q;
  const auto t0 = Clock::now();
  (void)q.Add("a:1", {}, t0);
  std::vector<std::string> keys;
  for (size_t i = 0; i < TouchQueue::kMaxKeys + 10; ++i) keys.push_back("key-" + std::to_string(i));
  std::vector<std::string_view> views(keys.begin(), keys.end());
  EXPECT_TRUE(q.Add("a:1", views, t0 + TouchQueue::kEvery / 2).empty());
  EXPECT_EQ(q.Add("a:1", {}, t0 + TouchQueue::kEvery).size(), TouchQueue::kMaxKeys);
}

}  // namespace
}  // namespace kvfabric::store
