#include "engine/batch.h"

#include <gtest/gtest.h>

#include <thread>

namespace kvfabric::engine {
namespace {

Clock::time_point In(int ms) { return Clock::now() + std::chrono::milliseconds(ms); }

// Reserves the one task of a one-task batch and starts it with `slices`
// slices and a deadline `ms` from now.
Task& StartOnlyTask(Batch& b, uint32_t slices, int ms, const char* what) {
  size_t first;
  EXPECT_TRUE(b.Reserve(1, &first));
  Task& t = b.task(first);
  b.outstanding_slices() += slices;
  t.Start(&b, slices, In(ms), ms, what);
  return t;
}

TEST(BatchTest, TaskCompletesWhenAllSlicesDo) {
  Batch b(1, 4);
  size_t first;
  ASSERT_TRUE(b.Reserve(2, &first));
  EXPECT_EQ(first, 0u);
  Task& t = b.task(0);
  b.outstanding_slices() += 3;
  t.Start(&b, 3, In(10000), 10000, "WRITE");
  t.OnSliceDone(100, Status::OK());
  t.OnSliceDone(100, Status::OK());
  EXPECT_EQ(t.Snapshot().state, TaskState::kPending);
  EXPECT_FALSE(t.Abandoned());
  t.OnSliceDone(56, Status::OK());
  TransferStatus s = t.Snapshot();
  EXPECT_EQ(s.state, TaskState::kCompleted);
  EXPECT_EQ(s.transferred_bytes, 256u);
  EXPECT_EQ(b.outstanding_slices().load(), 0);
  EXPECT_FALSE(b.AllDone());  // task 1 was reserved but never ended
  b.task(1).Start(&b, 0, In(1000), 1000, "x");
  b.task(1).Complete(0, Status::OK());
  EXPECT_TRUE(b.AllDone());
  EXPECT_FALSE(b.Reserve(3, &first));  // only 2 of 4 left
}

TEST(BatchTest, FirstFailedSliceFailsTheTask) {
  Batch b(1, 1);
  Task& t = StartOnlyTask(b, 2, 10000, "READ from peer");
  t.OnSliceDone(0, Status::FabricError("EPIPE"));
  TransferStatus s = t.Snapshot();
  EXPECT_EQ(s.state, TaskState::kFailed);  // before its other slice returns
  EXPECT_NE(s.error.message().find("READ from peer"), std::string::npos);
  EXPECT_TRUE(t.Abandoned());
  t.OnSliceDone(100, Status::OK());
  EXPECT_EQ(t.Snapshot().state, TaskState::kFailed);
  EXPECT_EQ(b.Aggregate().state, TaskState::kFailed);
}

TEST(BatchTest, DeadlineTurnsPendingIntoTimeout) {
  Batch b(1, 1);
  Task& t = StartOnlyTask(b, 1, 50, "WRITE to dead peer");
  auto t0 = Clock::now();
  b.Wait(In(5000));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(1));
  TransferStatus s = t.Snapshot();
  EXPECT_EQ(s.state, TaskState::kTimeout);
  EXPECT_EQ(s.error.code(), Status::Code::kTimeout);
  EXPECT_TRUE(t.Abandoned());
  t.OnSliceDone(10, Status::OK());  // a late completion changes nothing
  EXPECT_EQ(t.Snapshot().state, TaskState::kTimeout);
}

TEST(BatchTest, WaitWakesOnCompletion) {
  Batch b(1, 1);
  Task& t = StartOnlyTask(b, 1, 60000, "x");
  std::thread th([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    t.OnSliceDone(1, Status::OK());
  });
  auto t0 = Clock::now();
  b.Wait(In(10000));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(b.Aggregate().state, TaskState::kCompleted);
  th.join();
}

}  // namespace
}  // namespace kvfabric::engine
