#include "store/node/put_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace kvfabric::store {
namespace {

TEST(PutQueueTest, AdmitsWithinItsBytesOrWhenEmpty) {
  PutQueue<int> q(100, 1);
  EXPECT_TRUE(q.Admits(1000)) << "an empty queue takes one request of any size";
  ASSERT_TRUE(q.Push(1, 1000, false));
  EXPECT_FALSE(q.Admits(1));
  int job = 7;
  EXPECT_FALSE(q.Push(std::move(job), 1, false));
  EXPECT_EQ(job, 7) << "a refused job stays the caller's";
  EXPECT_TRUE(q.Push(2, 0, false)) << "a job of no bytes (a commit) is always admitted";
  EXPECT_EQ(q.bytes(), 1000u);
  bool opening = true;
  ASSERT_TRUE(q.Pop(&job, &opening));
  EXPECT_EQ(job, 1);
  EXPECT_FALSE(opening);
  EXPECT_EQ(q.bytes(), 0u);
  EXPECT_TRUE(q.Push(3, 60, false));
  EXPECT_TRUE(q.Push(4, 40, false));
  EXPECT_FALSE(q.Admits(1)) << "100 of 100 bytes held";
}

// Jobs whose writer must be opened wait while max_opening threads open
// one; ready jobs pass them, in order.
TEST(PutQueueTest, ReadyJobsPassJobsWaitingForAnOpen) {
  PutQueue<int> q(1 << 20, 1);
  ASSERT_TRUE(q.Push(1, 10, true));
  ASSERT_TRUE(q.Push(2, 10, true));
  ASSERT_TRUE(q.Push(3, 10, false));
  int job = 0;
  bool opening = false;
  ASSERT_TRUE(q.Pop(&job, &opening));
  EXPECT_EQ(job, 3);
  EXPECT_FALSE(opening);
  ASSERT_TRUE(q.Pop(&job, &opening));
  EXPECT_EQ(job, 1);
  EXPECT_TRUE(opening);
  // Job 2 waits for the open under way; job 4, ready, does not.
  std::atomic<int> got{0};
  std::thread second([&] {
    int j = 0;
    bool o = false;
    while (q.Pop(&j, &o)) {
      got = j;
      if (o) q.DoneOpening();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(got.load(), 0) << "a second open started while one was under way";
  ASSERT_TRUE(q.Push(4, 10, false));
  for (int i = 0; i < 1000 && got.load() != 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(got.load(), 4);
  q.DoneOpening();
  for (int i = 0; i < 1000 && got.load() != 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(got.load(), 2);
  q.Stop();
  second.join();
}

TEST(PutQueueTest, AStoppedQueueHandsOutWhatItHeldThenEnds) {
  PutQueue<int> q(1 << 20, 1);
  ASSERT_TRUE(q.Push(1, 10, true));
  ASSERT_TRUE(q.Push(2, 10, true));
  int job = 0;
  bool opening = false;
  ASSERT_TRUE(q.Pop(&job, &opening));  // an open under way
  q.Stop();
  EXPECT_FALSE(q.Push(3, 10, false));
  ASSERT_TRUE(q.Pop(&job, &opening)) << "stopping, the open under way does not hold back the rest";
  EXPECT_EQ(job, 2);
  EXPECT_FALSE(q.Pop(&job, &opening));
}

}  // namespace
}  // namespace kvfabric::store
