// Batches: many requests, many batches, many threads, their status, and
// requests refused whole before anything is posted.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "tests/integration/transport/fixture.h"
#include "tools/common/pattern.h"

namespace kvfabric::test {
namespace {

using tools::FillPattern;

class TransportBatchTest : public TransportFixture {};

TEST_P(TransportBatchTest, MultiWrite) {
  ASSERT_NO_FATAL_FAILURE(Start());
  BatchId b;
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 16; ++i) {
    FillPattern(local(i * 64 * KiB), 64 * KiB, i * 128 * KiB, 31);
    reqs.push_back(Req(OpCode::kWrite, i * 64 * KiB, i * 128 * KiB, 64 * KiB));
  }
  ASSERT_NO_FATAL_FAILURE(SubmitBatch(reqs, &b));
  TransferStatus agg;
  ASSERT_TRUE(engine_->WaitBatch(b, 30000, &agg).ok());
  EXPECT_EQ(agg.state, TaskState::kCompleted) << agg.error.ToString();
  EXPECT_EQ(agg.transferred_bytes, 16 * 64 * KiB);
  for (size_t i = 0; i < 16; ++i) {
    TransferStatus st;
    ASSERT_TRUE(engine_->GetTaskStatus(b, i, &st).ok());
    EXPECT_EQ(st.state, TaskState::kCompleted);
    EXPECT_EQ(st.transferred_bytes, 64 * KiB);
    EXPECT_EQ(target_->Check(i * 128 * KiB, 64 * KiB, 31), 64 * KiB) << "request " << i;
  }
  EXPECT_TRUE(engine_->FreeBatch(b).ok());
}

TEST_P(TransportBatchTest, StressMultipleBatches) {
  ASSERT_NO_FATAL_FAILURE(Start());
  for (uint32_t round = 0; round < 20; ++round) {
    BatchId b;
    ASSERT_TRUE(engine_->AllocateBatch(8, &b).ok());
    std::vector<TransferRequest> reqs;
    for (size_t i = 0; i < 8; ++i) {
      size_t off = (round * 8 + i) * 32 * KiB;
      FillPattern(local(off), 32 * KiB, off, 100 + round);
      reqs.push_back(Req(OpCode::kWrite, off, off, 32 * KiB));
    }
    ASSERT_TRUE(engine_->Submit(b, reqs).ok());
    TransferStatus agg;
    ASSERT_TRUE(engine_->WaitBatch(b, 30000, &agg).ok());
    ASSERT_EQ(agg.state, TaskState::kCompleted) << agg.error.ToString();
    ASSERT_TRUE(engine_->FreeBatch(b).ok());
  }
  for (uint32_t round = 0; round < 20; ++round)
    EXPECT_EQ(target_->Check(round * 8 * 32 * KiB, 8 * 32 * KiB, 100 + round), 8 * 32 * KiB) << round;
}

// 16 threads x 128 requests against 16 credits per rail: everything queues
// and completes; nothing is refused for lack of provider depth.
TEST_P(TransportBatchTest, ConcurrencyFarPastProviderDepth) {
  cfg_.settings.tx_depth = 16;
  ASSERT_NO_FATAL_FAILURE(Start(16 * MiB));
  EXPECT_LE(engine_->rails().front().tx_depth, 16u);
  constexpr size_t kThreads = 16, kBatch = 128, kLen = 4 * KiB;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      BatchId b;
      if (!engine_->AllocateBatch(kBatch, &b).ok()) { ++failures; return; }
      std::vector<TransferRequest> reqs;
      for (size_t i = 0; i < kBatch; ++i) {
        size_t off = (t * kBatch + i) * kLen;
        FillPattern(local(off), kLen, off, 80);
        reqs.push_back(Req(OpCode::kWrite, off, off, kLen));
      }
      TransferStatus agg;
      if (!engine_->Submit(b, reqs).ok() || !engine_->WaitBatch(b, 60000, &agg).ok() ||
          agg.state != TaskState::kCompleted)
        ++failures;
      if (!engine_->FreeBatch(b).ok()) ++failures;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(target_->Check(0, kThreads * kBatch * kLen, 80), kThreads * kBatch * kLen);
}

TEST_P(TransportBatchTest, BatchTooSmall) {
  ASSERT_NO_FATAL_FAILURE(Start());
  BatchId b;
  ASSERT_TRUE(engine_->AllocateBatch(2, &b).ok());
  std::vector<TransferRequest> three(3, Req(OpCode::kWrite, 0, 0, 4096));
  EXPECT_EQ(engine_->Submit(b, three).code(), Status::Code::kInvalidArgument);
  three.pop_back();
  ASSERT_TRUE(engine_->Submit(b, three).ok());
  EXPECT_EQ(engine_->Submit(b, {Req(OpCode::kWrite, 0, 0, 4096)}).code(), Status::Code::kInvalidArgument);
  TransferStatus agg;
  ASSERT_TRUE(engine_->WaitBatch(b, 30000, &agg).ok());
  EXPECT_EQ(agg.state, TaskState::kCompleted);
  EXPECT_TRUE(engine_->FreeBatch(b).ok());
  EXPECT_EQ(engine_->FreeBatch(b).code(), Status::Code::kNotFound);
  EXPECT_EQ(engine_->AllocateBatch(0, &b).code(), Status::Code::kInvalidArgument);
}

TEST_P(TransportBatchTest, RemoteOutOfRangeRefused) {
  ASSERT_NO_FATAL_FAILURE(Start(1 * MiB));
  BatchId b;
  ASSERT_TRUE(engine_->AllocateBatch(2, &b).ok());
  // The first request is valid, the second ends 1 byte past the buffer:
  // the whole submit is refused and nothing is posted.
  Status s = engine_->Submit(b, {Req(OpCode::kWrite, 0, 0, 4096), Req(OpCode::kWrite, 0, 1 * MiB - 4095, 4096)});
  EXPECT_EQ(s.code(), Status::Code::kOutOfRange) << s.ToString();
  TransferStatus st;
  EXPECT_EQ(engine_->GetTaskStatus(b, 0, &st).code(), Status::Code::kOutOfRange);
  EXPECT_EQ(engine_->Submit(b, {{OpCode::kRead, local(0), seg_, target_->addr - 4096, 4096}}).code(),
            Status::Code::kOutOfRange);
  EXPECT_EQ(engine_->Submit(b, {{OpCode::kRead, local(0), seg_, ~0ull - 10, 4096}}).code(),
            Status::Code::kOutOfRange);
  EXPECT_EQ(engine_->Submit(b, {{OpCode::kRead, local(0), 9999, target_->addr, 4096}}).code(),
            Status::Code::kNotFound);
  EXPECT_EQ(target_->Check(0, 1 * MiB, 7), 1 * MiB);  // target untouched
  EXPECT_TRUE(engine_->FreeBatch(b).ok());
}

TEST_P(TransportBatchTest, UnregisteredLocalRefused) {
  ASSERT_NO_FATAL_FAILURE(Start());
  std::vector<uint8_t> stack_buf(4096, 1);
  Status s = engine_->Transfer({{OpCode::kWrite, stack_buf.data(), seg_, target_->addr, 4096}});
  EXPECT_EQ(s.code(), Status::Code::kOutOfRange) << s.ToString();
  // A range that starts inside the registered buffer but runs past its end.
  s = engine_->Transfer({Req(OpCode::kRead, kLocalSize - 100, 0, 4096)});
  EXPECT_EQ(s.code(), Status::Code::kOutOfRange) << s.ToString();
  EXPECT_EQ(target_->Check(0, 4096, 7), 4096u);
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportBatchTest, ::testing::ValuesIn(DataPathCases()), CaseName);

}  // namespace
}  // namespace kvfabric::test
