// Bytes moved: which rails carry them, and that they land where written,
// checked in the target's own memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/transport/fixture.h"
#include "tools/common/pattern.h"

namespace kvfabric::test {
namespace {

using tools::CheckPattern;
using tools::FillPattern;

class TransportDataTest : public TransportFixture {
 protected:
  void ExpectEachNoticeOnce(bool by_message);
};

TEST_P(TransportDataTest, InstallTransport) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto rails = engine_->rails();
  ASSERT_FALSE(rails.empty());
  for (const auto& r : rails) EXPECT_GT(r.tx_depth, 0u) << r.provider << " " << r.domain;
  const std::string proto = GetParam().protocol;
  if (proto == "auto") {
    // EFA when present (a rail per device), else tcp; plus shm for same-host peers.
    ASSERT_GE(rails.size(), 2u);
    EXPECT_EQ(rails.back().provider, "shm");
    const std::string fabric = rails.front().provider;
    if (fabric != "efa") {
      EXPECT_EQ(fabric, "tcp;ofi_rxm");
      EXPECT_EQ(rails.size(), 2u);
    }
    for (size_t i = 0; i + 1 < rails.size(); ++i) EXPECT_EQ(rails[i].provider, fabric) << rails[i].domain;
  } else {
    // An explicitly named protocol is used as named: one rail for tcp and
    // shm, one per device for efa and verbs, all of that provider.
    const std::string want = proto == "tcp" || proto == "verbs" ? proto + ";ofi_rxm" : proto;
    for (const auto& r : rails) EXPECT_EQ(r.provider, want) << r.domain;
    if (proto == "tcp" || proto == "shm") {
      EXPECT_EQ(rails.size(), 1u);
    }
  }
}

// Bytes to a peer travel on the rail the protocol says: under auto, a peer on
// this host is reached through shm and the fabric's rails stay idle.
TEST_P(TransportDataTest, TrafficTakesTheExpectedRail) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_TRUE(WritePattern(0, 0, 4 * MiB, 5).ok());
  auto rails = engine_->rails();
  const std::string proto = GetParam().protocol;
  if (GetParam().where == Where::kSelf) {
    for (const auto& r : rails) EXPECT_EQ(r.completed_bytes, 0u) << "a local copy went through " << r.provider;
  } else if (proto == "auto") {
    for (size_t i = 0; i + 1 < rails.size(); ++i) EXPECT_EQ(rails[i].completed_bytes, 0u) << rails[i].domain;
    EXPECT_EQ(rails.back().completed_bytes, 4 * MiB);
  } else {
    uint64_t moved = 0;  // efa and verbs may spread it over their devices
    for (const auto& r : rails) moved += r.completed_bytes;
    EXPECT_EQ(moved, 4 * MiB);
  }
}

TEST_P(TransportDataTest, LoopbackWrite) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Status s = WritePattern(0, 4096, 64 * KiB, 11);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(target_->Check(4096, 64 * KiB, 11), 64 * KiB);
  // The bytes around the written range are untouched.
  EXPECT_EQ(target_->Check(0, 4096, 7), 4096u);
  EXPECT_EQ(target_->Check(4096 + 64 * KiB, 4096, 7), 4096u);
}

TEST_P(TransportDataTest, WriteAndRead) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_TRUE(WritePattern(0, 1 * MiB, 1 * MiB, 21).ok());
  std::memset(local(8 * MiB), 0, 1 * MiB);
  Status s = engine_->Transfer({Req(OpCode::kRead, 8 * MiB, 1 * MiB, 1 * MiB)});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(std::memcmp(local(0), local(8 * MiB), 1 * MiB), 0);
  // A read of bytes the target filled itself.
  target_->Fill(3 * MiB, 256 * KiB, 22);
  ASSERT_TRUE(engine_->Transfer({Req(OpCode::kRead, 0, 3 * MiB, 256 * KiB)}).ok());
  EXPECT_EQ(CheckPattern(local(0), 256 * KiB, 3 * MiB, 22), 256 * KiB);
}

TEST_P(TransportDataTest, LargeTransfer) {
  ASSERT_NO_FATAL_FAILURE(Start(128 * MiB));
  BatchId b;
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 64; ++i) {
    FillPattern(local(i * MiB), MiB, 64 * MiB + i * MiB, 61);
    reqs.push_back(Req(OpCode::kWrite, i * MiB, 64 * MiB + i * MiB, MiB));
  }
  ASSERT_NO_FATAL_FAILURE(SubmitBatch(reqs, &b));
  TransferStatus agg;
  ASSERT_TRUE(engine_->WaitBatch(b, 60000, &agg).ok());
  ASSERT_EQ(agg.state, TaskState::kCompleted) << agg.error.ToString();
  ASSERT_TRUE(engine_->FreeBatch(b).ok());
  EXPECT_EQ(target_->Check(64 * MiB, 64 * MiB, 61), 64 * MiB);
  EXPECT_EQ(target_->Check(0, 64 * MiB, 7), 64 * MiB);  // untouched half
  // Read all 128 MiB back in one batch and compare every byte.
  reqs.clear();
  for (size_t i = 0; i < 128; ++i) reqs.push_back(Req(OpCode::kRead, i * MiB, i * MiB, MiB));
  ASSERT_NO_FATAL_FAILURE(SubmitBatch(reqs, &b));
  ASSERT_TRUE(engine_->WaitBatch(b, 60000, &agg).ok());
  ASSERT_EQ(agg.state, TaskState::kCompleted) << agg.error.ToString();
  ASSERT_TRUE(engine_->FreeBatch(b).ok());
  EXPECT_EQ(CheckPattern(local(0), 64 * MiB, 0, 7), 64 * MiB);
  EXPECT_EQ(CheckPattern(local(64 * MiB), 64 * MiB, 64 * MiB, 61), 64 * MiB);
}

// A WRITE reported COMPLETED is already in the target's memory: the target
// checks its own bytes right after, with no other synchronisation.
TEST_P(TransportDataTest, WriteThenReadVisibility) {
  ASSERT_NO_FATAL_FAILURE(Start(64 * MiB));
  for (uint32_t round = 0; round < 6; ++round) {
    const size_t len = 8 * MiB, off = (round % 4) * len;
    ASSERT_TRUE(WritePattern(0, off, len, 90 + round).ok());
    ASSERT_EQ(target_->Check(off, len, 90 + round), len) << "round " << round;
  }
  // Many small writes in one batch, checked at once after completion.
  BatchId b;
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 64; ++i) {
    FillPattern(local(i * 64 * KiB), 64 * KiB, 40 * MiB + i * 64 * KiB, 99);
    reqs.push_back(Req(OpCode::kWrite, i * 64 * KiB, 40 * MiB + i * 64 * KiB, 64 * KiB));
  }
  ASSERT_NO_FATAL_FAILURE(SubmitBatch(reqs, &b));
  TransferStatus agg;
  ASSERT_TRUE(engine_->WaitBatch(b, 30000, &agg).ok());
  ASSERT_EQ(agg.state, TaskState::kCompleted);
  EXPECT_EQ(target_->Check(40 * MiB, 64 * 64 * KiB, 99), 64 * 64 * KiB);
  EXPECT_TRUE(engine_->FreeBatch(b).ok());
}

// WRITEs with notices: the target's engine reports each notice once, after
// the bytes of its WRITE are there (checked by the target as it takes
// them); a READ cannot carry one, and a WRITE without one reports nothing.
// `by_message`: the initiator sends each notice as a message after its
// WRITE (KVF_NOTICE_PATH=message), and counts them.
void TransportDataTest::ExpectEachNoticeOnce(bool by_message) {
  constexpr size_t kChunk = 4 * MiB;
  std::vector<TransferRequest> reqs;
  for (uint16_t n = 1; n <= 6; ++n) {
    const size_t off = (n - 1) * kChunk;
    FillPattern(local(off), kChunk, off, 77);
    reqs.push_back(Req(OpCode::kWrite, off, off, kChunk));
    reqs.back().notice = n;
  }
  BatchId b;
  ASSERT_NO_FATAL_FAILURE(SubmitBatch(reqs, &b));
  TransferStatus agg;
  ASSERT_TRUE(engine_->WaitBatch(b, 30000, &agg).ok());
  ASSERT_EQ(agg.state, TaskState::kCompleted) << agg.error.ToString();
  ASSERT_TRUE(engine_->FreeBatch(b).ok());
  std::istringstream words(target_->Notices(20000, 6, kChunk, 77));
  std::vector<std::string> got;
  for (std::string w; words >> w;) got.push_back(w);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"1:ok", "2:ok", "3:ok", "4:ok", "5:ok", "6:ok"}));
  EngineStats stats;
  ASSERT_TRUE(engine_->Stats(&stats).ok());
  const bool copies = GetParam().where == Where::kSelf;  // the own segment: no message
  EXPECT_EQ(stats.notice_messages_sent, by_message && !copies ? 6u : 0u);
  EXPECT_EQ(stats.notice_messages_failed, 0u);

  TransferRequest read = Req(OpCode::kRead, 0, 0, kChunk);
  read.notice = 9;
  const Status refused = engine_->Transfer({read});
  EXPECT_EQ(refused.code(), Status::Code::kInvalidArgument) << refused.ToString();
  ASSERT_TRUE(WritePattern(0, 0, kChunk, 78).ok());
  EXPECT_EQ(target_->Notices(300, 1, kChunk, 78), "") << "no notice asked, none given";
}

TEST_P(TransportDataTest, TheTargetLearnsOfEachWriteWithANoticeOnce) {
  ASSERT_NO_FATAL_FAILURE(Start(64 * MiB));
  ExpectEachNoticeOnce(/*by_message=*/false);
}

TEST_P(TransportDataTest, TheTargetLearnsOfEachWriteWithANoticeByMessageWhenAsked) {
  cfg_.settings.notice_path = "message";
  ASSERT_NO_FATAL_FAILURE(Start(64 * MiB));
  ExpectEachNoticeOnce(/*by_message=*/true);
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportDataTest, ::testing::ValuesIn(DataPathCases()), CaseName);

}  // namespace
}  // namespace kvfabric::test
