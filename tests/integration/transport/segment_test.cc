// Segments and what describes them: opening and warming up, memory
// registered in batches, probes and notifications over the handshake.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/integration/transport/fixture.h"
#include "tools/common/pattern.h"

namespace kvfabric::test {
namespace {

using tools::FillPattern;

class TransportSegmentTest : public TransportFixture {};

TEST_P(TransportSegmentTest, WarmupSegmentLoopback) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Status s = engine_->Warmup(target_->name);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(engine_->Warmup(target_->name).ok());  // idempotent
  SegmentHandle again;
  ASSERT_TRUE(engine_->OpenSegment(target_->name, &again).ok());
  EXPECT_EQ(again, seg_);
  ASSERT_TRUE(WritePattern(0, 0, 128 * KiB, 41).ok());
  EXPECT_EQ(target_->Check(0, 128 * KiB, 41), 128 * KiB);
}

TEST_P(TransportSegmentTest, WarmupSegmentNotFound) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto t0 = std::chrono::steady_clock::now();
  Status s = engine_->Warmup("127.0.0.1:1");  // nothing listens on port 1
  EXPECT_FALSE(s.ok());
  // p2p cannot connect; a metadata store has no such segment.
  EXPECT_EQ(s.code(), !GetParam().metadata.empty() ? Status::Code::kNotFound : Status::Code::kNetworkError)
      << s.ToString();
  EXPECT_NE(s.message().find("127.0.0.1:1"), std::string::npos) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(6));
  SegmentHandle h;
  EXPECT_FALSE(engine_->OpenSegment("not-a-host-name.invalid:1234", &h).ok());
  EXPECT_FALSE(engine_->OpenSegment("no-port", &h).ok());
}

TEST_P(TransportSegmentTest, RepeatedOpenSegment) {
  ASSERT_NO_FATAL_FAILURE(Start());
  for (uint32_t i = 0; i < 10; ++i) {
    SegmentHandle h;
    ASSERT_TRUE(engine_->OpenSegment(target_->name, &h).ok());
    EXPECT_EQ(h, seg_);
    FillPattern(local(0), 16 * KiB, i * 16 * KiB, 70 + i);
    ASSERT_TRUE(engine_->Transfer({{OpCode::kWrite, local(0), h, target_->addr + i * 16 * KiB, 16 * KiB}}).ok());
    EXPECT_EQ(target_->Check(i * 16 * KiB, 16 * KiB, 70 + i), 16 * KiB);
  }
}

TEST_P(TransportSegmentTest, RegisterMemoryBatch) {
  ASSERT_NO_FATAL_FAILURE(Start());
  std::vector<BufferEntry> bufs;
  std::vector<void*> addrs;
  for (int i = 0; i < 4; ++i) {
    void* p = nullptr;
    ASSERT_EQ(posix_memalign(&p, 4096, 1 * MiB), 0);
    bufs.push_back({p, 1 * MiB, "cpu:0"});
    addrs.push_back(p);
  }
  ASSERT_TRUE(engine_->RegisterMemoryBatch(bufs).ok());
  // Each registered buffer transfers.
  FillPattern(addrs[2], 64 * KiB, 0, 51);
  ASSERT_TRUE(engine_->Transfer({{OpCode::kWrite, addrs[2], seg_, target_->addr, 64 * KiB}}).ok());
  EXPECT_EQ(target_->Check(0, 64 * KiB, 51), 64 * KiB);
  // Registering an overlapping range is refused and changes nothing.
  EXPECT_EQ(engine_->RegisterMemory(static_cast<uint8_t*>(addrs[1]) + 4096, 4096).code(),
            Status::Code::kInvalidArgument);
  ASSERT_TRUE(engine_->UnregisterMemoryBatch(addrs).ok());
  // Unregistered again: refused as a whole; transfers from it are refused.
  EXPECT_EQ(engine_->UnregisterMemoryBatch(addrs).code(), Status::Code::kNotFound);
  Status s = engine_->Transfer({{OpCode::kWrite, addrs[2], seg_, target_->addr, 64 * KiB}});
  EXPECT_EQ(s.code(), Status::Code::kOutOfRange) << s.ToString();
  ASSERT_TRUE(engine_->RegisterMemoryBatch(bufs).ok());  // round trip
  ASSERT_TRUE(engine_->UnregisterMemoryBatch(addrs).ok());
  for (void* p : addrs) std::free(p);
}

// A buffer registered read-only: peers see it so in the descriptor, READ
// it, and their WRITEs are refused before anything is posted, the memory
// unchanged (a peer that posts one anyway meets the provider's refusal:
// RailTest.APeerCannotWriteMemoryRegisteredForReadingOnly). The owner is a
// second engine with the case's settings, or the initiator itself.
TEST_P(TransportSegmentTest, PeersReadAndNeverWriteABufferRegisteredReadOnly) {
  ASSERT_NO_FATAL_FAILURE(Start());
  std::unique_ptr<Engine> other;
  Engine* owner = engine_.get();
  if (GetParam().where != Where::kSelf) {
    ASSERT_TRUE(Engine::Create(cfg_, &other).ok());
    owner = other.get();
  }
  void* p = nullptr;
  ASSERT_EQ(posix_memalign(&p, 4096, 1 * MiB), 0);
  FillPattern(p, 1 * MiB, 0, 61);
  ASSERT_TRUE(owner->RegisterMemoryBatch({{p, 1 * MiB, "*", /*read_only=*/true}}).ok());
  const auto addr = reinterpret_cast<uint64_t>(p);
  SegmentHandle h;
  ASSERT_TRUE(engine_->OpenSegment(owner->name(), &h).ok());
  std::vector<RemoteBuffer> bufs;
  ASSERT_TRUE(engine_->GetSegmentBuffers(h, &bufs).ok());
  bool listed = false;
  for (const RemoteBuffer& b : bufs) listed = listed || (b.addr == addr && b.read_only);
  EXPECT_TRUE(listed) << "the buffer is not listed as read-only";

  FillPattern(local(0), 64 * KiB, 0, 62);
  Status s = engine_->Transfer({{OpCode::kWrite, local(0), h, addr, 64 * KiB}});
  EXPECT_EQ(s.code(), Status::Code::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("read-only"), std::string::npos) << s.ToString();
  // A batch with a READ and such a WRITE is refused whole.
  BatchId b;
  ASSERT_TRUE(engine_->AllocateBatch(2, &b).ok());
  s = engine_->Submit(b, {{OpCode::kRead, local(0), h, addr, 4 * KiB}, {OpCode::kWrite, local(0), h, addr, 4 * KiB}});
  EXPECT_EQ(s.code(), Status::Code::kPermissionDenied) << s.ToString();
  ASSERT_TRUE(engine_->FreeBatch(b).ok());
  EXPECT_EQ(tools::CheckPattern(p, 1 * MiB, 0, 61), 1 * MiB) << "a refused WRITE changed the memory";

  ASSERT_TRUE(engine_->Transfer({{OpCode::kRead, local(0), h, addr + 64 * KiB, 128 * KiB}}).ok());
  EXPECT_EQ(tools::CheckPattern(local(0), 128 * KiB, 64 * KiB, 61), 128 * KiB);
  ASSERT_TRUE(owner->UnregisterMemory(p).ok());
  other.reset();
  std::free(p);
}

TEST_P(TransportSegmentTest, ProbeAndNotify) {
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_TRUE(engine_->Probe(target_->name).ok());
  EXPECT_EQ(engine_->Probe("127.0.0.1:1").code(), Status::Code::kNetworkError);
  // Messages to this engine's own handshake server, read back in order.
  ASSERT_TRUE(engine_->SendNotify(engine_->name(), "first").ok());
  ASSERT_TRUE(engine_->SendNotify(engine_->name(), std::string(1000, 'x')).ok());
  std::vector<std::string> got;
  ASSERT_TRUE(engine_->GetNotifies(&got).ok());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], "first");
  EXPECT_EQ(got[1], std::string(1000, 'x'));
  ASSERT_TRUE(engine_->GetNotifies(&got).ok());
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(engine_->SendNotify("127.0.0.1:1", "lost?").code(), Status::Code::kNetworkError);
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportSegmentTest, ::testing::ValuesIn(TransportCases()), CaseName);

}  // namespace
}  // namespace kvfabric::test
