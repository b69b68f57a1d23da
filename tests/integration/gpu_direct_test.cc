// GPU memory registered in place (FI_HMEM), as on EFA, on a host without GPU
// or EFA (fake_gpu_direct.h): what each registration asks of libfabric, and
// device memory moving between engines with no copy through the driver.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "fake_gpu_direct.h"
#include "kvfabric/engine.h"
#include "memory/cuda.h"
#include "tools/common/pattern.h"

namespace kvfabric {
namespace {

constexpr size_t MiB = 1 << 20;

class GpuDirectTest : public ::testing::Test {
 protected:
  void Install(uint32_t api_version, bool refuse_dmabuf = false) {
    fake_ = std::make_unique<FakeGpuDirect>(api_version, refuse_dmabuf);
  }

  void TearDown() override {
    a_.reset();
    b_.reset();
    fake_.reset();
    for (void* p : allocs_) memory::cuda::Free(p);
  }

  std::unique_ptr<Engine> NewEngine(int64_t chunk_bytes = 0, const std::string& protocol = "tcp") {
    EngineConfig cfg;
    cfg.protocol = protocol;
    cfg.apply_environment = false;
    cfg.settings.cuda = true;
    cfg.settings.cuda_library = KVF_FAKE_CUDA_PATH;
    cfg.settings.log_level = "warn";
    if (chunk_bytes > 0) cfg.settings.mr_chunk_bytes = chunk_bytes;
    std::unique_ptr<Engine> e;
    Status s = Engine::Create(cfg, &e);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return e;
  }

  uint8_t* DeviceAlloc(int device, size_t n) {
    void* p = nullptr;
    EXPECT_TRUE(memory::cuda::Alloc(device, n, &p).ok());
    allocs_.push_back(p);
    return static_cast<uint8_t*>(p);
  }

  std::vector<Seen> SeenSince(size_t from) { return fake_->SeenSince(from); }
  size_t SeenCount() { return fake_->SeenCount(); }
  unsigned long copies_() { return fake_->copies(); }
  unsigned long exports_() { return fake_->exports(); }

  // a WRITEs its device memory into b's device memory and READs it back
  // into other device memory; every byte checked, and no byte went through
  // the driver (no staging, no device copy): the provider touched the
  // device memory in place.
  void MoveDeviceToDevice(uint8_t* a_dev, uint8_t* b_dev, size_t n) {
    SegmentHandle to_b;
    ASSERT_TRUE(a_->OpenSegment(b_->name(), &to_b).ok());
    const auto remote = reinterpret_cast<uint64_t>(b_dev);
    tools::FillPattern(a_dev, n, 0, 61);
    std::memset(b_dev, 0, n);
    const unsigned long before = copies_();
    Status s = a_->Transfer({{OpCode::kWrite, a_dev, to_b, remote, n}});
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(tools::CheckPattern(b_dev, n, 0, 61), n);
    tools::FillPattern(b_dev, n, 0, 62);
    std::memset(a_dev, 0, n);
    s = a_->Transfer({{OpCode::kRead, a_dev, to_b, remote, n}});
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(tools::CheckPattern(a_dev, n, 0, 62), n);
    EXPECT_EQ(copies_() - before, 0u) << "GPU bytes went through the driver (staged) instead of the NIC";
  }

  std::unique_ptr<FakeGpuDirect> fake_;
  std::unique_ptr<Engine> a_, b_;
  std::vector<void*> allocs_;
};

TEST_F(GpuDirectTest, DmabufRegistrationNamesTheDeviceTheFdAndTheOffsetOfEveryChunk) {
  Install(FI_VERSION(1, 20));
  a_ = NewEngine(/*chunk_bytes=*/4 * MiB);
  b_ = NewEngine();
  ASSERT_TRUE(a_ && b_);
  constexpr size_t kAlloc = 16 * MiB, kOff = 64 * 1024, kLen = 10 * MiB;
  uint8_t* a_dev = DeviceAlloc(1, kAlloc);
  uint8_t* b_dev = DeviceAlloc(0, kAlloc);
  const unsigned long exports = exports_();
  size_t from = SeenCount();
  // A buffer inside the allocation: its dma-buf offsets count from the allocation's start.
  ASSERT_TRUE(a_->RegisterMemory(a_dev + kOff, kLen, "cuda:1").ok());
  EXPECT_EQ(exports_() - exports, 1u) << "one dma-buf per buffer, shared by its chunks and rails";
  const auto rails = a_->rails().size();
  auto seen = SeenSince(from);
  ASSERT_EQ(seen.size(), 3 * rails);  // 10 MiB in chunks of 4 MiB: 4 + 4 + 2
  for (size_t i = 0; i < seen.size(); ++i) {
    const Seen& s = seen[i];
    const size_t chunk = i / rails;
    SCOPED_TRACE(i);
    EXPECT_EQ(s.iface, FI_HMEM_CUDA);
    EXPECT_EQ(s.device, 1);
    EXPECT_TRUE(s.dmabuf);
    EXPECT_EQ(s.dmabuf_alloc, reinterpret_cast<uintptr_t>(a_dev));
    EXPECT_EQ(s.dmabuf_alloc_length, kAlloc);
    EXPECT_EQ(s.dmabuf_base, reinterpret_cast<uintptr_t>(a_dev));
    EXPECT_EQ(s.dmabuf_offset, kOff + chunk * 4 * MiB);
    EXPECT_EQ(s.addr, reinterpret_cast<uintptr_t>(a_dev) + kOff + chunk * 4 * MiB);
    EXPECT_EQ(s.length, chunk < 2 ? 4 * MiB : 2 * MiB);
  }
  // Host memory: no interface, no dma-buf.
  std::vector<uint8_t> host(MiB);
  from = SeenCount();
  ASSERT_TRUE(a_->RegisterMemory(host.data(), host.size()).ok());
  for (const Seen& s : SeenSince(from)) {
    EXPECT_EQ(s.iface, FI_HMEM_SYSTEM);
    EXPECT_FALSE(s.dmabuf);
  }
  ASSERT_TRUE(b_->RegisterMemory(b_dev, kAlloc, "cuda:0").ok());
  MoveDeviceToDevice(a_dev + kOff, b_dev, kLen);
  MemoryFacts facts;
  ASSERT_TRUE(a_->DescribeMemory(a_dev + kOff, kLen, &facts).ok());
  EXPECT_TRUE(facts.device);
  EXPECT_TRUE(facts.remote_access);
}

TEST_F(GpuDirectTest, BelowLibfabric120GpuMemoryIsRegisteredByDeviceAddress) {
  Install(/*api_version=*/0);  // the loaded 1.17: no FI_MR_DMABUF
  a_ = NewEngine();
  b_ = NewEngine();
  ASSERT_TRUE(a_ && b_);
  uint8_t* a_dev = DeviceAlloc(0, 8 * MiB);
  uint8_t* b_dev = DeviceAlloc(1, 8 * MiB);
  const unsigned long exports = exports_();
  const size_t from = SeenCount();
  ASSERT_TRUE(a_->RegisterMemory(a_dev, 8 * MiB, "*").ok());  // found to be cuda:0
  ASSERT_TRUE(b_->RegisterMemory(b_dev, 8 * MiB, "cuda:1").ok());
  EXPECT_EQ(exports_(), exports) << "no dma-buf is exported when no rail may use one";
  auto seen = SeenSince(from);
  ASSERT_FALSE(seen.empty());
  for (const Seen& s : seen) {
    EXPECT_EQ(s.iface, FI_HMEM_CUDA);
    EXPECT_FALSE(s.dmabuf);
    EXPECT_TRUE(s.addr == reinterpret_cast<uintptr_t>(a_dev) || s.addr == reinterpret_cast<uintptr_t>(b_dev));
    EXPECT_EQ(s.device, s.addr == reinterpret_cast<uintptr_t>(a_dev) ? 0 : 1);
  }
  MoveDeviceToDevice(a_dev, b_dev, 8 * MiB);
}

TEST_F(GpuDirectTest, AProviderRefusingDmabufGetsTheDeviceAddressAndTheBytesStillMove) {
  Install(FI_VERSION(1, 20), /*refuse_dmabuf=*/true);
  a_ = NewEngine();
  b_ = NewEngine();
  ASSERT_TRUE(a_ && b_);
  uint8_t* a_dev = DeviceAlloc(0, 4 * MiB);
  uint8_t* b_dev = DeviceAlloc(0, 4 * MiB);
  size_t from = SeenCount();
  ASSERT_TRUE(a_->RegisterMemory(a_dev, 4 * MiB, "cuda:0").ok());
  auto seen = SeenSince(from);
  ASSERT_EQ(seen.size(), 2 * a_->rails().size());  // refused by dma-buf, then taken by address
  EXPECT_TRUE(seen[0].dmabuf);
  EXPECT_FALSE(seen[1].dmabuf);
  EXPECT_EQ(seen[1].addr, reinterpret_cast<uintptr_t>(a_dev));
  // The rail no longer offers dma-bufs: the next buffer goes by address at once.
  from = SeenCount();
  const unsigned long exports = exports_();
  void* more = DeviceAlloc(0, MiB);
  ASSERT_TRUE(a_->RegisterMemory(more, MiB, "cuda:0").ok());
  EXPECT_EQ(exports_(), exports);
  for (const Seen& s : SeenSince(from)) EXPECT_FALSE(s.dmabuf);
  ASSERT_TRUE(b_->RegisterMemory(b_dev, 4 * MiB, "cuda:0").ok());
  MoveDeviceToDevice(a_dev, b_dev, 4 * MiB);
}

TEST_F(GpuDirectTest, ADeviceThatExportsNoDmabufIsRegisteredByAddress) {
  setenv("FAKE_CUDA_DMABUF", "0", 1);
  Install(FI_VERSION(1, 20));
  a_ = NewEngine();
  b_ = NewEngine();
  ASSERT_TRUE(a_ && b_);
  uint8_t* a_dev = DeviceAlloc(1, 2 * MiB);
  std::vector<uint8_t> b_host(2 * MiB);
  const unsigned long exports = exports_();
  const size_t from = SeenCount();
  ASSERT_TRUE(a_->RegisterMemory(a_dev, 2 * MiB, "cuda:1").ok());
  EXPECT_EQ(exports_(), exports);
  for (const Seen& s : SeenSince(from)) {
    EXPECT_EQ(s.device, 1);
    EXPECT_FALSE(s.dmabuf);
  }
  // Device memory to a peer's host memory and back, in place.
  ASSERT_TRUE(b_->RegisterMemory(b_host.data(), b_host.size()).ok());
  SegmentHandle to_b;
  ASSERT_TRUE(a_->OpenSegment(b_->name(), &to_b).ok());
  tools::FillPattern(a_dev, 2 * MiB, 0, 71);
  const unsigned long before = copies_();
  ASSERT_TRUE(a_->Transfer({{OpCode::kWrite, a_dev, to_b, reinterpret_cast<uint64_t>(b_host.data()), 2 * MiB}}).ok());
  EXPECT_EQ(tools::CheckPattern(b_host.data(), 2 * MiB, 0, 71), 2 * MiB);
  EXPECT_EQ(copies_(), before);
  unsetenv("FAKE_CUDA_DMABUF");
}

TEST_F(GpuDirectTest, SameHostGpuMemoryGoesOverTheNicsAndHostMemoryOverShm) {
  // Protocol auto: a same-host peer is reached over the shm rail, which is
  // kept to host memory. GPU memory there is held by the NIC rails only, so
  // its requests take those (in place), and host memory stays on shm.
  Install(/*api_version=*/0);
  a_ = NewEngine(0, "auto");
  b_ = NewEngine(0, "auto");
  ASSERT_TRUE(a_ && b_);
  const auto rails = a_->rails();
  size_t shm = rails.size();
  for (size_t i = 0; i < rails.size(); ++i)
    if (rails[i].provider == "shm") shm = i;
  if (shm == rails.size()) GTEST_SKIP() << "no shm rail opened here";
  uint8_t* a_dev = DeviceAlloc(0, 4 * MiB);
  uint8_t* b_dev = DeviceAlloc(1, 4 * MiB);
  ASSERT_TRUE(a_->RegisterMemory(a_dev, 4 * MiB, "cuda:0").ok());
  ASSERT_TRUE(b_->RegisterMemory(b_dev, 4 * MiB, "cuda:1").ok());
  auto bytes = [&](bool on_shm) {
    uint64_t n = 0;
    const auto now = a_->rails();
    for (size_t i = 0; i < now.size(); ++i)
      if ((i == shm) == on_shm) n += now[i].completed_bytes;
    return n;
  };
  const uint64_t nic_before = bytes(false), shm_before = bytes(true);
  MoveDeviceToDevice(a_dev, b_dev, 4 * MiB);
  EXPECT_GE(bytes(false) - nic_before, 8 * MiB) << "GPU bytes did not go over the NIC rails";
  EXPECT_EQ(bytes(true), shm_before) << "GPU bytes went over the shm rail";
  std::vector<uint8_t> a_host(MiB), b_host(MiB);
  ASSERT_TRUE(a_->RegisterMemory(a_host.data(), MiB).ok());
  ASSERT_TRUE(b_->RegisterMemory(b_host.data(), MiB).ok());
  SegmentHandle to_b;
  ASSERT_TRUE(a_->OpenSegment(b_->name(), &to_b).ok());
  tools::FillPattern(a_host.data(), MiB, 0, 81);
  ASSERT_TRUE(a_->Transfer({{OpCode::kWrite, a_host.data(), to_b, reinterpret_cast<uint64_t>(b_host.data()), MiB}}).ok());
  EXPECT_EQ(tools::CheckPattern(b_host.data(), MiB, 0, 81), MiB);
  EXPECT_GE(bytes(true) - shm_before, MiB) << "same-host host memory left the shm rail";
  (void)a_->UnregisterMemory(a_host.data());
  (void)b_->UnregisterMemory(b_host.data());
}

}  // namespace
}  // namespace kvfabric
