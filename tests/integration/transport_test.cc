// One test body for every transport (UCX style): each test runs over tcp and
// shm against a separate process, against a second engine in this process,
// and (data tests) against the engine's own segment. Bytes are checked in the
// target's own memory, not just read back.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "kvfabric/engine.h"
#include "tests/support/pattern.h"
#include "tests/support/servers.h"
#include "tests/support/targets.h"

namespace kvfabric {
namespace {

using testing::CheckPattern;
using testing::FillPattern;

enum class Where { kProcess, kInProcess, kSelf };

struct Mode {
  const char* name;
  const char* protocol;
  Where where;
  const char* settings = "";  // "NAME=value ..." for initiator and target alike
  const char* metadata = "";  // "" (p2p), "etcd" or "http": a real server the tests start
};

constexpr size_t KiB = 1024, MiB = 1024 * KiB;

class TransportTest : public ::testing::TestWithParam<Mode> {
 protected:
  static constexpr size_t kLocalSize = 136 * MiB;

  void SetUp() override {
    cfg_.protocol = GetParam().protocol;
    cfg_.apply_environment = false;
    cfg_.settings.log_level = "error";
    cfg_.settings.transfer_timeout_ms = 20000;
    std::istringstream words(GetParam().settings);
    for (std::string kv; words >> kv;) ASSERT_TRUE(cfg_.settings.Assign(kv).ok()) << kv;
    if (*GetParam().metadata) {
      std::string why;
      cfg_.metadata = testing::SharedMetadataUri(GetParam().metadata, &why);
      if (cfg_.metadata.empty()) GTEST_SKIP() << why;
    }
  }
  void TearDown() override {
    target_.reset();
    if (engine_ && local_) engine_->UnregisterMemory(local_);
    engine_.reset();
    std::free(local_);
  }

  // Creates the initiator (with cfg_) and a target with a buffer of `size`.
  void Start(size_t target_size = 16 * MiB, const std::string& peer_settings = "") {
    Status created = Engine::Create(cfg_, &engine_);
    ASSERT_TRUE(created.ok()) << created.ToString();
    ASSERT_EQ(posix_memalign(&local_, 4096, kLocalSize), 0);
    ASSERT_TRUE(engine_->RegisterMemory(local_, kLocalSize).ok());
    std::string err;
    switch (GetParam().where) {
      case Where::kProcess:
        target_ = testing::StartProcessTarget(
            GetParam().protocol, target_size,
            peer_settings + " " + GetParam().settings + (cfg_.metadata == "p2p" ? "" : " metadata=" + cfg_.metadata),
            &err);
        break;
      case Where::kInProcess:
        target_ = testing::StartLocalTarget(GetParam().protocol, target_size, nullptr, &err);
        break;
      case Where::kSelf:
        target_ = testing::StartLocalTarget(GetParam().protocol, target_size, engine_.get(), &err);
        break;
    }
    ASSERT_NE(target_, nullptr) << err;
    Status s = engine_->OpenSegment(target_->name, &seg_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  uint8_t* local(size_t off = 0) { return static_cast<uint8_t*>(local_) + off; }
  TransferRequest Req(OpCode op, size_t local_off, size_t remote_off, size_t len) {
    return {op, local(local_off), seg_, target_->addr + remote_off, len};
  }
  // Writes pattern `seed` (as positioned at the target) from local_off to remote_off.
  Status WritePattern(size_t local_off, size_t remote_off, size_t len, uint32_t seed) {
    FillPattern(local(local_off), len, remote_off, seed);
    return engine_->Transfer({Req(OpCode::kWrite, local_off, remote_off, len)});
  }

  // Allocates a batch of exactly `reqs` and submits them.
  void SubmitBatch(const std::vector<TransferRequest>& reqs, BatchId* b) {
    ASSERT_TRUE(engine_->AllocateBatch(reqs.size(), b).ok());
    Status s = engine_->Submit(*b, reqs);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // Peers in the engine's address vectors, summed over its rails, once it
  // equals `want` (stale slots leave when their operations are done), or
  // after 10 s.
  size_t WaitForPeerSlots(size_t want) {
    size_t n = 0;
    for (int i = 0; i < 200; ++i) {
      n = 0;
      for (const RailInfo& r : engine_->rails()) n += r.peer_slots;
      if (n == want) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return n;
  }

  EngineConfig cfg_;
  std::unique_ptr<Engine> engine_;
  void* local_ = nullptr;
  std::unique_ptr<testing::Target> target_;
  SegmentHandle seg_ = -1;
};

TEST_P(TransportTest, InstallTransport) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto rails = engine_->rails();
  ASSERT_FALSE(rails.empty());
  const std::string proto = GetParam().protocol;
  // auto: EFA when present, else tcp; plus shm for same-host peers.
  std::string want = proto == "shm" ? "shm" : "tcp;ofi_rxm";
  if (proto == "auto" && rails.front().provider == "efa") want = "efa";  // on an EFA host
  EXPECT_EQ(rails.front().provider, want);
  EXPECT_GT(rails.front().tx_depth, 0u);
  if (proto == "auto") {
    ASSERT_EQ(rails.size(), 2u);
    EXPECT_EQ(rails.back().provider, "shm");
  } else {
    EXPECT_EQ(rails.size(), 1u);  // an explicitly named protocol is used as named
  }
}

// Bytes to a peer travel on the rail the protocol says: under auto, a peer on
// this host is reached through shm and the tcp rail stays idle.
TEST_P(TransportTest, TrafficTakesTheExpectedRail) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_TRUE(WritePattern(0, 0, 4 * MiB, 5).ok());
  auto rails = engine_->rails();
  const std::string proto = GetParam().protocol;
  if (GetParam().where == Where::kSelf) {
    for (const auto& r : rails) EXPECT_EQ(r.completed_bytes, 0u) << "a local copy went through " << r.provider;
  } else if (proto == "auto") {
    EXPECT_EQ(rails.front().completed_bytes, 0u);
    EXPECT_EQ(rails.back().completed_bytes, 4 * MiB);
  } else {
    EXPECT_EQ(rails.front().completed_bytes, 4 * MiB);
  }
}

TEST_P(TransportTest, LoopbackWrite) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Status s = WritePattern(0, 4096, 64 * KiB, 11);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(target_->Check(4096, 64 * KiB, 11), 64 * KiB);
  // The bytes around the written range are untouched.
  EXPECT_EQ(target_->Check(0, 4096, 7), 4096u);
  EXPECT_EQ(target_->Check(4096 + 64 * KiB, 4096, 7), 4096u);
}

TEST_P(TransportTest, WriteAndRead) {
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

TEST_P(TransportTest, MultiWrite) {
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

TEST_P(TransportTest, StressMultipleBatches) {
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

TEST_P(TransportTest, WarmupSegmentLoopback) {
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

TEST_P(TransportTest, WarmupSegmentNotFound) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto t0 = std::chrono::steady_clock::now();
  Status s = engine_->Warmup("127.0.0.1:1");  // nothing listens on port 1
  EXPECT_FALSE(s.ok());
  // p2p cannot connect; a metadata store has no such segment.
  EXPECT_EQ(s.code(), *GetParam().metadata ? Status::Code::kNotFound : Status::Code::kNetworkError)
      << s.ToString();
  EXPECT_NE(s.message().find("127.0.0.1:1"), std::string::npos) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(6));
  SegmentHandle h;
  EXPECT_FALSE(engine_->OpenSegment("not-a-host-name.invalid:1234", &h).ok());
  EXPECT_FALSE(engine_->OpenSegment("no-port", &h).ok());
}

TEST_P(TransportTest, RegisterMemoryBatch) {
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

TEST_P(TransportTest, LargeTransfer) {
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

TEST_P(TransportTest, RepeatedOpenSegment) {
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

// 16 threads x 128 requests against 16 credits per rail: everything queues
// and completes; nothing is refused for lack of provider depth.
TEST_P(TransportTest, ConcurrencyFarPastProviderDepth) {
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
      engine_->FreeBatch(b);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(target_->Check(0, kThreads * kBatch * kLen, 80), kThreads * kBatch * kLen);
}

TEST_P(TransportTest, RemoteOutOfRangeRefused) {
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

TEST_P(TransportTest, UnregisteredLocalRefused) {
  ASSERT_NO_FATAL_FAILURE(Start());
  std::vector<uint8_t> stack_buf(4096, 1);
  Status s = engine_->Transfer({{OpCode::kWrite, stack_buf.data(), seg_, target_->addr, 4096}});
  EXPECT_EQ(s.code(), Status::Code::kOutOfRange) << s.ToString();
  // A range that starts inside the registered buffer but runs past its end.
  s = engine_->Transfer({Req(OpCode::kRead, kLocalSize - 100, 0, 4096)});
  EXPECT_EQ(s.code(), Status::Code::kOutOfRange) << s.ToString();
  EXPECT_EQ(target_->Check(0, 4096, 7), 4096u);
}

TEST_P(TransportTest, ProbeAndNotify) {
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

TEST(MetadataStoreTest, SegmentsLeaveTheStoreWithTheirEngine) {
  std::string why;
  const std::string uri = testing::SharedMetadataUri("etcd", &why);
  if (uri.empty()) GTEST_SKIP() << why;
  EngineConfig cfg;
  cfg.protocol = "tcp";
  cfg.metadata = uri;
  cfg.apply_environment = false;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(cfg, &e).ok());

  // A clean shutdown removes the segment at once.
  std::string gone_name;
  {
    std::unique_ptr<Engine> b;
    ASSERT_TRUE(Engine::Create(cfg, &b).ok());
    gone_name = b->name();
    SegmentHandle h;
    ASSERT_TRUE(e->OpenSegment(gone_name, &h).ok());
    ASSERT_TRUE(e->CloseSegment(h).ok());
  }
  SegmentHandle h;
  EXPECT_EQ(e->OpenSegment(gone_name, &h).code(), Status::Code::kNotFound);

  // A killed process's segment goes when its lease expires (2 s here).
  std::string err;
  auto t = testing::StartProcessTarget("tcp", 1 << 20, "KVF_METADATA_LEASE_S=2 metadata=" + uri, &err);
  ASSERT_NE(t, nullptr) << err;
  ASSERT_TRUE(e->OpenSegment(t->name, &h).ok());
  ASSERT_TRUE(e->CloseSegment(h).ok());
  const std::string name = t->name;
  ASSERT_TRUE(t->Kill());
  const auto start = std::chrono::steady_clock::now();
  Status s;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    s = e->OpenSegment(name, &h);
    if (s.code() == Status::Code::kNotFound) break;
    if (s.ok()) e->CloseSegment(h);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(MetadataStoreTest, UnreachableStoreFailsCreateCleanly) {
  for (const char* uri : {"etcd://127.0.0.1:1", "http://127.0.0.1:1/metadata"}) {
    EngineConfig cfg;
    cfg.protocol = "tcp";
    cfg.metadata = uri;
    cfg.apply_environment = false;
    std::unique_ptr<Engine> e;
    const auto t0 = std::chrono::steady_clock::now();
    Status s = Engine::Create(cfg, &e);
    EXPECT_EQ(s.code(), Status::Code::kNetworkError) << uri << ": " << s.ToString();
    EXPECT_EQ(e, nullptr);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(6)) << uri;
  }
  EngineConfig cfg;
  cfg.metadata = "zookeeper://127.0.0.1:2181";
  std::unique_ptr<Engine> e;
  EXPECT_EQ(Engine::Create(cfg, &e).code(), Status::Code::kInvalidArgument);
}

TEST(AuthTest, PeersWithoutTheSecretAreRefused) {
  std::string err;
  auto t = testing::StartProcessTarget("tcp", 1 << 20, "KVF_AUTH_TOKEN=team-secret", &err);
  ASSERT_NE(t, nullptr) << err;
  for (const char* token : {"", "wrong"}) {
    EngineConfig cfg;
    cfg.protocol = "tcp";
    cfg.apply_environment = false;
    cfg.settings.auth_token = token;
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Engine::Create(cfg, &e).ok());
    SegmentHandle h;
    Status s = e->OpenSegment(t->name, &h);
    EXPECT_EQ(s.code(), Status::Code::kPermissionDenied) << "token '" << token << "': " << s.ToString();
    EXPECT_EQ(e->Probe(t->name).code(), Status::Code::kPermissionDenied);
  }
  EngineConfig cfg;
  cfg.protocol = "tcp";
  cfg.apply_environment = false;
  cfg.settings.auth_token = "team-secret";
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(cfg, &e).ok());
  EXPECT_EQ(e->settings().Get("KVF_AUTH_TOKEN"), "(set)");
  std::vector<uint8_t> buf(1 << 20);
  ASSERT_TRUE(e->RegisterMemory(buf.data(), buf.size()).ok());
  SegmentHandle h;
  ASSERT_TRUE(e->OpenSegment(t->name, &h).ok());
  FillPattern(buf.data(), buf.size(), 0, 131);
  ASSERT_TRUE(e->Transfer({{OpCode::kWrite, buf.data(), h, t->addr, buf.size()}}).ok());
  EXPECT_EQ(t->Check(0, buf.size(), 131), buf.size());
  ASSERT_TRUE(e->UnregisterMemory(buf.data()).ok());
}

TEST(NotifyTest, FullQueueRefusesInsteadOfDropping) {
  EngineConfig cfg;
  cfg.protocol = "tcp";
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(cfg, &e).ok());
  for (int i = 0; i < 4096; ++i) ASSERT_TRUE(e->SendNotify(e->name(), std::to_string(i)).ok()) << i;
  Status s = e->SendNotify(e->name(), "one too many");
  EXPECT_NE(s.message().find("GetNotifies"), std::string::npos) << s.ToString();
  std::vector<std::string> got;
  ASSERT_TRUE(e->GetNotifies(&got).ok());
  ASSERT_EQ(got.size(), 4096u);
  EXPECT_EQ(got.front(), "0");
  EXPECT_EQ(got.back(), "4095");
  EXPECT_TRUE(e->SendNotify(e->name(), "room again").ok());
}

TEST_P(TransportTest, BatchTooSmall) {
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

// A WRITE reported COMPLETED is already in the target's memory: the target
// checks its own bytes right after, with no other synchronisation.
TEST_P(TransportTest, WriteThenReadVisibility) {
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
  engine_->FreeBatch(b);
}

// Needs a target that can die: instantiated for the process modes only.
class PeerFailureTest : public TransportTest {};

TEST_P(PeerFailureTest, PeerKilledMidBatch) {
  cfg_.settings.transfer_timeout_ms = 3000;
  ASSERT_NO_FATAL_FAILURE(Start(64 * MiB));
  BatchId b;
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 256; ++i) reqs.push_back(Req(i % 2 ? OpCode::kRead : OpCode::kWrite, (i % 64) * MiB, (i % 64) * MiB, MiB));
  // Frozen first, so the batch is surely in flight (not finished) at the kill.
  ASSERT_TRUE(target_->Freeze());
  ASSERT_NO_FATAL_FAILURE(SubmitBatch(reqs, &b));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(target_->Kill());
  auto t0 = std::chrono::steady_clock::now();
  TransferStatus agg;
  ASSERT_TRUE(engine_->WaitBatch(b, 15000, &agg).ok());
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_NE(agg.state, TaskState::kPending) << "requests hang after the peer died";
  EXPECT_LT(took, std::chrono::seconds(6)) << "requests outlived their deadline";
  size_t ended_badly = 0;
  for (size_t i = 0; i < 256; ++i) {
    TransferStatus st;
    ASSERT_TRUE(engine_->GetTaskStatus(b, i, &st).ok());
    EXPECT_NE(st.state, TaskState::kPending);
    if (st.state != TaskState::kCompleted) {
      ++ended_badly;
      EXPECT_FALSE(st.error.ok());
    }
  }
  EXPECT_GT(ended_badly, 0u);
  EXPECT_TRUE(engine_->FreeBatch(b).ok());
  // The engine keeps serving other peers.
  std::string err;
  auto other = testing::StartProcessTarget(GetParam().protocol, 4 * MiB, "", &err);
  ASSERT_NE(other, nullptr) << err;
  SegmentHandle h;
  ASSERT_TRUE(engine_->OpenSegment(other->name, &h).ok());
  FillPattern(local(0), MiB, 0, 111);
  Status s = engine_->Transfer({{OpCode::kWrite, local(0), h, other->addr, MiB}});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(other->Check(0, MiB, 111), MiB);
}

INSTANTIATE_TEST_SUITE_P(
    Transports, TransportTest,
    ::testing::Values(Mode{"tcp", "tcp", Where::kProcess}, Mode{"shm", "shm", Where::kProcess},
                      Mode{"tcp_in_process", "tcp", Where::kInProcess},
                      Mode{"shm_in_process", "shm", Where::kInProcess},
                      Mode{"auto", "auto", Where::kProcess},
                      Mode{"tcp_posted_directly", "tcp", Where::kProcess, "KVF_POST_MODE=direct"},
                      Mode{"tcp_etcd", "tcp", Where::kProcess, "", "etcd"},
                      Mode{"tcp_http", "tcp", Where::kProcess, "", "http"},
                      Mode{"own_segment", "tcp", Where::kSelf}),
    [](const ::testing::TestParamInfo<Mode>& i) { return std::string(i.param.name); });

TEST_P(PeerFailureTest, UnregisterRevokesRemoteAccess) {
  cfg_.settings.transfer_timeout_ms = 3000;
  ASSERT_NO_FATAL_FAILURE(Start(4 * MiB));
  ASSERT_TRUE(WritePattern(0, 0, 64 * KiB, 141).ok());
  ASSERT_TRUE(target_->Unregister());
  // The initiator still holds the old descriptor: the request is posted with
  // the revoked key and must fail, leaving the memory as it was.
  FillPattern(local(0), MiB, 0, 142);
  const auto t0 = std::chrono::steady_clock::now();
  Status w = engine_->Transfer({Req(OpCode::kWrite, 0, 0, MiB)});
  EXPECT_FALSE(w.ok());
  Status r = engine_->Transfer({Req(OpCode::kRead, 0, 0, MiB)});
  EXPECT_FALSE(r.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(8));
  EXPECT_EQ(target_->Check(0, 64 * KiB, 141), 64 * KiB);
  EXPECT_EQ(target_->Check(64 * KiB, MiB - 64 * KiB, 7), MiB - 64 * KiB);
  // After the failure the engine refetches the descriptor: the range is now
  // refused before anything is posted.
  Status again = engine_->Transfer({Req(OpCode::kWrite, 0, 0, MiB)});
  EXPECT_EQ(again.code(), Status::Code::kOutOfRange) << again.ToString();
  RecordProperty("write_after_unregister", w.ToString());
}

TEST_P(PeerFailureTest, SegmentClosedWithWorkInFlight) {
  cfg_.settings.transfer_timeout_ms = 2000;
  ASSERT_NO_FATAL_FAILURE(Start(16 * MiB));
  BatchId b;
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 16; ++i) reqs.push_back(Req(OpCode::kWrite, i * MiB, i * MiB, MiB));
  ASSERT_TRUE(target_->Freeze());
  ASSERT_NO_FATAL_FAILURE(SubmitBatch(reqs, &b));
  ASSERT_TRUE(engine_->CloseSegment(seg_).ok());
  // The closed handle is refused; the batch still ends within its deadline.
  EXPECT_EQ(engine_->Transfer({Req(OpCode::kWrite, 0, 0, 4096)}).code(), Status::Code::kNotFound);
  TransferStatus agg;
  ASSERT_TRUE(engine_->WaitBatch(b, 10000, &agg).ok());
  EXPECT_NE(agg.state, TaskState::kPending);
  EXPECT_TRUE(engine_->FreeBatch(b).ok());
  target_->Kill();
  // The closed segment's address leaves the AV once its operations end.
  EXPECT_EQ(WaitForPeerSlots(0), 0u);
}

TEST_P(PeerFailureTest, EngineDestroyedWithWorkInFlight) {
  ASSERT_NO_FATAL_FAILURE(Start(64 * MiB));
  BatchId b;
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 64; ++i) reqs.push_back(Req(OpCode::kWrite, i * MiB, i * MiB, MiB));
  ASSERT_TRUE(target_->Freeze());  // nothing completes
  ASSERT_NO_FATAL_FAILURE(SubmitBatch(reqs, &b));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(engine_->UnregisterMemory(local_).ok());
  engine_.reset();  // no crash, no hang
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  std::free(local_);
  local_ = nullptr;
  target_->Kill();
}

TEST_P(PeerFailureTest, PeerRestartedUnderTheSameName) {
  // A fixed handshake port, so the restarted target has the same name. And a
  // fixed buffer address: the stale descriptor still covers the range the
  // application writes to, so only the failure tells the engine.
  const int port = testing::FreePort();
  ASSERT_GT(port, 0);
  const std::string fixed = "local_server_name=127.0.0.1:" + std::to_string(port) +
                            " buffer_addr=0x7e0000000000";
  cfg_.settings.transfer_timeout_ms = 3000;
  ASSERT_NO_FATAL_FAILURE(Start(4 * MiB, fixed));
  ASSERT_TRUE(WritePattern(0, 0, MiB, 121).ok());
  const std::string name = target_->name;
  ASSERT_TRUE(target_->Kill());
  std::string err;
  target_ = testing::StartProcessTarget(GetParam().protocol, 4 * MiB, fixed, &err);
  ASSERT_NE(target_, nullptr) << err;
  ASSERT_EQ(target_->name, name);
  ASSERT_EQ(target_->addr, 0x7e0000000000u);
  // The old process's address is gone: the first request may fail (within
  // its deadline), then the engine refetches the descriptor (new epoch) and
  // the next one goes to the new process.
  const auto t0 = std::chrono::steady_clock::now();
  Status first = WritePattern(0, 0, MiB, 122);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << first.ToString();
  Status second = WritePattern(MiB, MiB, MiB, 123);
  ASSERT_TRUE(second.ok()) << second.ToString() << " (first: " << first.ToString() << ")";
  EXPECT_EQ(target_->Check(MiB, MiB, 123), MiB);
  if (first.ok()) {
    EXPECT_EQ(target_->Check(0, MiB, 122), MiB);
  }
  RecordProperty("first_request_after_restart", first.ToString());
  // Only the new process stays in the address vector; a second restart
  // leaves no more behind than the first.
  EXPECT_EQ(WaitForPeerSlots(1), 1u);
  ASSERT_TRUE(target_->Kill());
  target_ = testing::StartProcessTarget(GetParam().protocol, 4 * MiB, fixed, &err);
  ASSERT_NE(target_, nullptr) << err;
  WritePattern(0, 0, MiB, 124);  // may meet the restart
  Status third = WritePattern(MiB, MiB, MiB, 125);
  ASSERT_TRUE(third.ok()) << third.ToString();
  EXPECT_EQ(target_->Check(MiB, MiB, 125), MiB);
  EXPECT_EQ(WaitForPeerSlots(1), 1u);
}

INSTANTIATE_TEST_SUITE_P(
    Transports, PeerFailureTest,
    ::testing::Values(Mode{"tcp", "tcp", Where::kProcess}, Mode{"shm", "shm", Where::kProcess}),
    [](const ::testing::TestParamInfo<Mode>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace kvfabric
