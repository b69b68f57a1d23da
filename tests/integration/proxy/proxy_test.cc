// The proxy queue over each provider found: producer threads put WRITEs
// in the ring and the proxy moves them through the engine to a target
// engine, every byte checked there; a bad command fails alone and its
// producer's Quiet says why; bad input changes nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvfabric/engine.h"
#include "kvfabric/proxy.h"
#include "tests/support/providers.h"
#include "tools/common/pattern.h"

namespace kvfabric::test {
namespace {

using proxy::ProxyOptions;
using proxy::ProxyQueue;

constexpr size_t KiB = 1024, MiB = 1024 * KiB;

std::unique_ptr<Engine> NewEngine(const std::string& protocol) {
  EngineConfig cfg;
  cfg.protocol = protocol;
  cfg.apply_environment = false;
  cfg.settings.log_level = "error";
  cfg.settings.transfer_timeout_ms = 10000;
  std::unique_ptr<Engine> e;
  const Status s = Engine::Create(cfg, &e);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return e;
}

class ProxyTest : public ::testing::TestWithParam<std::string> {
 protected:
  static constexpr size_t kBytes = 32 * MiB;
  void SetUp() override {
    src_.assign(kBytes, 0);
    dst_.assign(kBytes, 0);
    initiator_ = NewEngine(GetParam());
    target_ = NewEngine(GetParam());
    ASSERT_TRUE(initiator_ && target_);
    ASSERT_TRUE(initiator_->RegisterMemory(src_.data(), kBytes).ok());
    ASSERT_TRUE(target_->RegisterMemory(dst_.data(), kBytes).ok());
    ASSERT_TRUE(initiator_->OpenSegment(target_->name(), &seg_).ok());
  }
  uint64_t remote(size_t off) const { return reinterpret_cast<uint64_t>(dst_.data()) + off; }

  std::vector<uint8_t> src_, dst_;
  std::unique_ptr<Engine> initiator_, target_;
  SegmentHandle seg_ = -1;
};

TEST_P(ProxyTest, ProducersWritesLandByteExact) {
  // Four producers, each 256 WRITEs of 32 KiB into its own eighth of the
  // buffer, a Quiet every 64 and at the end; a ring of 64 commands, so
  // producers wait for the proxy to free slots.
  ProxyOptions o;
  o.capacity = 64;
  o.producers = 4;
  o.max_batch = 16;
  std::unique_ptr<ProxyQueue> q;
  ASSERT_TRUE(ProxyQueue::Create(initiator_.get(), o, &q).ok());
  constexpr size_t kEach = 256, kBlock = 32 * KiB;
  tools::FillPattern(src_.data(), kBytes, 0, 61);
  std::vector<std::thread> producers;
  std::vector<Status> quiet(4);
  for (uint64_t p = 0; p < 4; ++p)
    producers.emplace_back([&, p] {
      for (size_t i = 0; i < kEach; ++i) {
        const size_t off = (p * kEach + i) * kBlock;
        Status s = q->PutNbi(p, src_.data() + off, seg_, remote(off), kBlock);
        if (s.ok() && (i + 1) % 64 == 0) s = q->Quiet(p, 20000);
        if (!s.ok()) {
          quiet[p] = s;
          return;
        }
      }
    });
  for (auto& t : producers) t.join();
  for (uint64_t p = 0; p < 4; ++p) EXPECT_TRUE(quiet[p].ok()) << p << ": " << quiet[p].ToString();
  EXPECT_EQ(tools::CheckPattern(dst_.data(), 4 * kEach * kBlock, 0, 61), 4 * kEach * kBlock);
  const proxy::ProxyStats st = q->stats();
  EXPECT_EQ(st.commands, 4 * kEach);
  EXPECT_EQ(st.failed, 0u);
  EXPECT_GE(st.batches, 4 * kEach / o.max_batch);
}

TEST_P(ProxyTest, ABadCommandFailsAloneAndItsProducersQuietSaysWhy) {
  ProxyOptions o;
  o.producers = 2;
  std::unique_ptr<ProxyQueue> q;
  ASSERT_TRUE(ProxyQueue::Create(initiator_.get(), o, &q).ok());
  tools::FillPattern(src_.data(), MiB, 0, 62);
  // Producer 0: a WRITE past the end of the target's buffer between good
  // ones of producer 1, all put before either quiets.
  ASSERT_TRUE(q->PutNbi(1, src_.data(), seg_, remote(0), 512 * KiB).ok());
  ASSERT_TRUE(q->PutNbi(0, src_.data(), seg_, remote(kBytes - 4 * KiB), 64 * KiB).ok());
  ASSERT_TRUE(q->PutNbi(1, src_.data() + 512 * KiB, seg_, remote(512 * KiB), 512 * KiB).ok());
  const Status bad = q->Quiet(0, 10000);
  EXPECT_EQ(bad.code(), Status::Code::kOutOfRange) << bad.ToString();
  EXPECT_TRUE(q->Quiet(1, 10000).ok());
  EXPECT_EQ(tools::CheckPattern(dst_.data(), MiB, 0, 62), MiB) << "the good WRITEs landed";
  EXPECT_TRUE(q->Quiet(0, 10000).ok()) << "a failure is reported once";
  EXPECT_EQ(q->stats().failed, 1u);
  // Unknown segment: fails alone too.
  ASSERT_TRUE(q->PutNbi(0, src_.data(), seg_ + 1000, remote(0), 4 * KiB).ok());
  EXPECT_EQ(q->Quiet(0, 10000).code(), Status::Code::kNotFound);
}

TEST_P(ProxyTest, BadInputIsRefusedAndChangesNothing) {
  std::unique_ptr<ProxyQueue> q;
  ProxyOptions o;
  o.capacity = 3;
  EXPECT_EQ(ProxyQueue::Create(initiator_.get(), o, &q).code(), Status::Code::kInvalidArgument) << "a power of two";
  o.capacity = 8;
  o.max_batch = 9;
  EXPECT_EQ(ProxyQueue::Create(initiator_.get(), o, &q).code(), Status::Code::kInvalidArgument);
  o.max_batch = 8;
  o.producers = 0;
  EXPECT_EQ(ProxyQueue::Create(initiator_.get(), o, &q).code(), Status::Code::kInvalidArgument);
  o.producers = 2;
  ASSERT_TRUE(ProxyQueue::Create(initiator_.get(), o, &q).ok());
  EXPECT_EQ(q->PutNbi(2, src_.data(), seg_, remote(0), 4096).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(q->PutNbi(0, src_.data(), seg_, remote(0), 0).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(q->Quiet(2).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(q->stats().commands, 0u);
  EXPECT_EQ(kvf_proxy_issued(q->ring())[0], 0u) << "nothing was put";
}

TEST_P(ProxyTest, CommandsLeftInTheRingLandBeforeTheQueueGoes) {
  tools::FillPattern(src_.data(), 8 * MiB, 0, 63);
  {
    std::unique_ptr<ProxyQueue> q;
    ASSERT_TRUE(ProxyQueue::Create(initiator_.get(), {}, &q).ok());
    for (size_t i = 0; i < 64; ++i)
      ASSERT_TRUE(q->PutNbi(0, src_.data() + i * 128 * KiB, seg_, remote(i * 128 * KiB), 128 * KiB).ok());
  }
  EXPECT_EQ(tools::CheckPattern(dst_.data(), 8 * MiB, 0, 63), 8 * MiB);
}

INSTANTIATE_TEST_SUITE_P(Transports, ProxyTest, ::testing::ValuesIn(FabricProtocols()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace kvfabric::test
