// The hardware runbook's transfer tests (tests/hw/run.sh): the ten transfer
// tests the leading engine's EFA guide runs, here over efa with GPU memory
// on both sides (two engines in this process, GPU to GPU through the NIC),
// every byte checked through the CUDA driver. Each test skips, saying why,
// on a host without an efa device or a GPU, so `make test` only builds this;
// run.sh runs it where the hardware is. KVF_HW_PROTOCOL picks another
// protocol (verbs) for hosts with GPUDirect over InfiniBand.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fabric/fabric_info.h"
#include "kvfabric/engine.h"
#include "memory/cuda.h"
#include "tools/common/pattern.h"

namespace kvfabric {
namespace {

constexpr size_t MiB = 1 << 20;

std::string Protocol() {
  const char* p = getenv("KVF_HW_PROTOCOL");
  return p != nullptr && *p != '\0' ? p : "efa";
}

class EfaGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Status s = memory::cuda::Load();
    if (!s.ok()) GTEST_SKIP() << "no usable CUDA driver: " << s.message();
    std::string provider;
    if (!fabric::ProviderForProtocol(Protocol(), &provider).ok() || !fabric::ProviderAvailable(provider))
      GTEST_SKIP() << "no " << Protocol() << " device here (fi_info -p " << Protocol() << ")";
    a_ = NewEngine();
    b_ = NewEngine();
    ASSERT_TRUE(a_ && b_);
  }
  void TearDown() override {
    for (auto& [e, p] : registered_) (void)e->UnregisterMemory(p);
    a_.reset();
    b_.reset();
    for (void* p : device_) memory::cuda::Free(p);
  }

  std::unique_ptr<Engine> NewEngine() {
    EngineConfig cfg;
    cfg.protocol = Protocol();
    cfg.apply_environment = true;  // the runbook's KVF_* settings apply
    std::unique_ptr<Engine> e;
    Status s = Engine::Create(cfg, &e);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return e;
  }

  // Registered GPU memory of `device` (the last GPU for b, the first for a:
  // two GPUs where the host has them).
  uint8_t* Gpu(Engine* e, size_t n) {
    const int device = e == a_.get() ? 0 : memory::cuda::DeviceCount() - 1;
    void* p = nullptr;
    EXPECT_TRUE(memory::cuda::Alloc(device, n, &p).ok());
    device_.push_back(p);
    Status s = e->RegisterMemory(p, n, "cuda:" + std::to_string(device));
    EXPECT_TRUE(s.ok()) << s.ToString();
    registered_.push_back({e, p});
    return static_cast<uint8_t*>(p);
  }
  int DeviceOf(const void* p) {
    int d = -1;
    EXPECT_TRUE(memory::cuda::IsDevicePointer(p, &d));
    return d;
  }
  void Fill(uint8_t* gpu, size_t n, uint64_t seed) {
    std::vector<uint8_t> host(n);
    tools::FillPattern(host.data(), n, 0, seed);
    ASSERT_TRUE(memory::cuda::Copy(gpu, host.data(), n, DeviceOf(gpu)).ok());
  }
  size_t Check(const uint8_t* gpu, size_t n, uint64_t seed) {
    std::vector<uint8_t> host(n);
    EXPECT_TRUE(memory::cuda::Copy(host.data(), gpu, n, DeviceOf(gpu)).ok());
    return tools::CheckPattern(host.data(), n, 0, seed);
  }
  // Every rail GPU memory crossed registered it in place (FI_HMEM).
  void ExpectInPlace(Engine* e, const void* p, size_t n) {
    MemoryFacts f;
    ASSERT_TRUE(e->DescribeMemory(p, n, &f).ok());
    EXPECT_TRUE(f.remote_access) << "GPU memory was not registered on any rail (no FI_HMEM): it would be staged";
  }

  std::unique_ptr<Engine> a_, b_;
  std::vector<void*> device_;
  std::vector<std::pair<Engine*, void*>> registered_;
};

TEST_F(EfaGpuTest, InstallTransport) {
  const auto rails = a_->rails();
  ASSERT_FALSE(rails.empty());
  for (const RailInfo& r : rails) EXPECT_EQ(r.provider, Protocol() == "efa" ? "efa" : r.provider);
  uint8_t* g = Gpu(a_.get(), MiB);
  ExpectInPlace(a_.get(), g, MiB);
}

TEST_F(EfaGpuTest, LoopbackWrite) {
  // One engine writing its own GPU memory through its segment.
  uint8_t* src = Gpu(a_.get(), 4 * MiB);
  uint8_t* dst = Gpu(a_.get(), 4 * MiB);
  Fill(src, 4 * MiB, 1);
  SegmentHandle self;
  ASSERT_TRUE(a_->OpenSegment(a_->name(), &self).ok());
  Status s = a_->Transfer({{OpCode::kWrite, src, self, reinterpret_cast<uint64_t>(dst), 4 * MiB}});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Check(dst, 4 * MiB, 1), 4 * MiB);
}

TEST_F(EfaGpuTest, WriteAndRead) {
  uint8_t* a = Gpu(a_.get(), 8 * MiB);
  uint8_t* b = Gpu(b_.get(), 8 * MiB);
  ExpectInPlace(a_.get(), a, 8 * MiB);
  ExpectInPlace(b_.get(), b, 8 * MiB);
  SegmentHandle peer;
  ASSERT_TRUE(a_->OpenSegment(b_->name(), &peer).ok());
  Fill(a, 8 * MiB, 2);
  Status s = a_->Transfer({{OpCode::kWrite, a, peer, reinterpret_cast<uint64_t>(b), 8 * MiB}});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Check(b, 8 * MiB, 2), 8 * MiB);
  Fill(b, 8 * MiB, 3);
  s = a_->Transfer({{OpCode::kRead, a, peer, reinterpret_cast<uint64_t>(b), 8 * MiB}});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Check(a, 8 * MiB, 3), 8 * MiB);
}

TEST_F(EfaGpuTest, MultiWrite) {
  uint8_t* a = Gpu(a_.get(), 16 * MiB);
  uint8_t* b = Gpu(b_.get(), 16 * MiB);
  SegmentHandle peer;
  ASSERT_TRUE(a_->OpenSegment(b_->name(), &peer).ok());
  Fill(a, 16 * MiB, 4);
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 16; ++i)
    reqs.push_back({OpCode::kWrite, a + i * MiB, peer, reinterpret_cast<uint64_t>(b) + i * MiB, MiB});
  Status s = a_->Transfer(reqs);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Check(b, 16 * MiB, 4), 16 * MiB);
}

TEST_F(EfaGpuTest, StressMultipleBatches) {
  uint8_t* a = Gpu(a_.get(), 8 * MiB);
  uint8_t* b = Gpu(b_.get(), 8 * MiB);
  SegmentHandle peer;
  ASSERT_TRUE(a_->OpenSegment(b_->name(), &peer).ok());
  Fill(a, 8 * MiB, 5);
  for (int batch = 0; batch < 20; ++batch) {
    std::vector<TransferRequest> reqs;
    for (size_t i = 0; i < 8; ++i)
      reqs.push_back({batch % 2 ? OpCode::kRead : OpCode::kWrite, a + i * MiB, peer,
                      reinterpret_cast<uint64_t>(b) + i * MiB, MiB});
    Status s = a_->Transfer(reqs);
    ASSERT_TRUE(s.ok()) << "batch " << batch << ": " << s.ToString();
  }
  EXPECT_EQ(Check(b, 8 * MiB, 5), 8 * MiB);
  EXPECT_EQ(Check(a, 8 * MiB, 5), 8 * MiB);
}

TEST_F(EfaGpuTest, WarmupSegmentLoopback) {
  uint8_t* a = Gpu(a_.get(), MiB);
  uint8_t* b = Gpu(b_.get(), MiB);
  ASSERT_TRUE(a_->Warmup(b_->name()).ok());
  ASSERT_TRUE(a_->Warmup(b_->name()).ok());  // idempotent
  SegmentHandle peer;
  ASSERT_TRUE(a_->OpenSegment(b_->name(), &peer).ok());
  Fill(a, MiB, 6);
  ASSERT_TRUE(a_->Transfer({{OpCode::kWrite, a, peer, reinterpret_cast<uint64_t>(b), MiB}}).ok());
  EXPECT_EQ(Check(b, MiB, 6), MiB);
}

TEST_F(EfaGpuTest, WarmupSegmentNotFound) {
  Status s = a_->Warmup("127.0.0.1:1");
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(s.message().empty());
}

TEST_F(EfaGpuTest, RegisterMemoryBatch) {
  std::vector<void*> ptrs;
  std::vector<BufferEntry> entries;
  for (int i = 0; i < 8; ++i) {
    void* p = nullptr;
    ASSERT_TRUE(memory::cuda::Alloc(0, 2 * MiB, &p).ok());
    device_.push_back(p);
    ptrs.push_back(p);
    entries.push_back({p, 2 * MiB, "cuda:0"});
  }
  ASSERT_TRUE(a_->RegisterMemoryBatch(entries).ok());
  for (void* p : ptrs) ExpectInPlace(a_.get(), p, 2 * MiB);
  ASSERT_TRUE(a_->UnregisterMemoryBatch(ptrs).ok());
  ASSERT_TRUE(a_->RegisterMemoryBatch(entries).ok());  // again, after unregistering
  ASSERT_TRUE(a_->UnregisterMemoryBatch(ptrs).ok());
}

TEST_F(EfaGpuTest, LargeTransfer) {
  constexpr size_t kBytes = 128 * MiB;
  uint8_t* a = Gpu(a_.get(), kBytes);
  uint8_t* b = Gpu(b_.get(), kBytes);
  SegmentHandle peer;
  ASSERT_TRUE(a_->OpenSegment(b_->name(), &peer).ok());
  Fill(a, kBytes, 7);
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 64; ++i)
    reqs.push_back({OpCode::kWrite, a + i * 2 * MiB, peer, reinterpret_cast<uint64_t>(b) + i * 2 * MiB, 2 * MiB});
  Status s = a_->Transfer(reqs);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Check(b, kBytes, 7), kBytes);
}

TEST_F(EfaGpuTest, RepeatedOpenSegment) {
  uint8_t* a = Gpu(a_.get(), MiB);
  uint8_t* b = Gpu(b_.get(), MiB);
  for (int i = 0; i < 10; ++i) {
    SegmentHandle peer;
    ASSERT_TRUE(a_->OpenSegment(b_->name(), &peer).ok());
    Fill(a, MiB, 10 + i);
    Status s = a_->Transfer({{OpCode::kWrite, a, peer, reinterpret_cast<uint64_t>(b), MiB}});
    ASSERT_TRUE(s.ok()) << "round " << i << ": " << s.ToString();
    EXPECT_EQ(Check(b, MiB, 10 + i), MiB);
  }
}

}  // namespace
}  // namespace kvfabric
