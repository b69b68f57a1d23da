// The store with GPU memory, through the fake CUDA driver
// (tests/support/fake_cuda.c, whose "device memory" is host memory it
// tracks): pages put from GPU buffers no rail exposes go through the
// client's bounce buffer; pages read into GPU buffers land through the
// engine's staging and are not checksummed (counted); host buffers keep
// their checks. A node (host pool) and a client run in this process over tcp.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "fake_gpu_direct.h"
#include "gpu_engine.h"
#include "kvfabric/store.h"
#include "memory/cuda.h"
#include "tools/common/pattern.h"

namespace kvfabric {
namespace {

constexpr size_t KiB = 1024;

class GpuStoreTest : public ::testing::Test {
 protected:
  // A node with a 16 MiB pool and a client whose bounce buffer holds
  // `bounce` bytes; with `in_place`, the client's rails register GPU memory
  // (FakeGpuDirect), as EFA's do.
  void Start(int64_t bounce, bool in_place = false) {
    if (in_place) fake_ = std::make_unique<FakeGpuDirect>(/*api_version=*/0);
    client_engine_ = NewGpuTestEngine(KVF_FAKE_CUDA_PATH, true);  // loads the fake driver
    node_engine_ = NewGpuTestEngine(KVF_FAKE_CUDA_PATH, false);
    ASSERT_TRUE(node_engine_ && client_engine_);
    Settings s = node_engine_->settings();
    s.store_pool_bytes = 16 << 20;
    s.store_listen = "127.0.0.1:0";
    Status st = Store::Create(node_engine_.get(), s, &node_);
    ASSERT_TRUE(st.ok()) << st.ToString();
    s = client_engine_->settings();
    s.store_pool_bytes = 0;
    s.store_members = node_->name();
    s.store_bounce_bytes = bounce;
    st = Store::Create(client_engine_.get(), s, &client_);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(client_engine_->OpenSegment(client_engine_->name(), &self_).ok());
    host_.resize(4 << 20);
    ASSERT_TRUE(client_engine_->RegisterMemory(host_.data(), host_.size(), "cpu").ok());
  }
  void TearDown() override {
    client_.reset();
    node_.reset();
    for (void* d : device_) {
      if (client_engine_) (void)client_engine_->UnregisterMemory(d);
      memory::cuda::Free(d);
    }
    if (client_engine_ && !host_.empty()) (void)client_engine_->UnregisterMemory(host_.data());
    client_engine_.reset();
    node_engine_.reset();
    fake_.reset();
  }
  // Registered GPU memory of device 0.
  uint8_t* Device(size_t bytes) {
    void* d = nullptr;
    EXPECT_TRUE(memory::cuda::Alloc(0, bytes, &d).ok());
    EXPECT_TRUE(client_engine_->RegisterMemory(d, bytes, "cuda:0").ok());
    device_.push_back(d);
    return static_cast<uint8_t*>(d);
  }
  // Host <-> device copies through the engine's own segment.
  void ToDevice(uint8_t* dev, const uint8_t* host, size_t n) {
    Status s = client_engine_->Transfer(
        {{OpCode::kWrite, const_cast<uint8_t*>(host), self_, reinterpret_cast<uint64_t>(dev), n}});
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void FromDevice(uint8_t* host, const uint8_t* dev, size_t n) {
    Status s = client_engine_->Transfer({{OpCode::kRead, host, self_, reinterpret_cast<uint64_t>(dev), n}});
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  std::unique_ptr<FakeGpuDirect> fake_;
  std::unique_ptr<Engine> node_engine_, client_engine_;
  std::unique_ptr<Store> node_, client_;
  SegmentHandle self_ = -1;
  std::vector<uint8_t> host_;  // registered host memory: [0, 2 MiB) staging, [2 MiB, 4 MiB) GET destinations
  std::vector<void*> device_;
};

TEST_F(GpuStoreTest, FakeDriverPagesFromAndIntoGpuMemoryAreByteExact) {
  Start(256 * KiB);  // two 128 KiB pages a round: the bounce buffer is reused
  const std::vector<size_t> sizes = {128 * KiB, 100 * KiB, 128 * KiB, 4 * KiB, 77 * KiB};
  std::vector<std::string> keys;
  std::vector<std::vector<StoreBuffer>> from, into_device, into_host;
  uint8_t* dev = Device(2 << 20);
  uint8_t* dev_back = Device(2 << 20);
  size_t off = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    keys.push_back("gpu-page-" + std::to_string(i));
    tools::FillPattern(host_.data() + off, sizes[i], 0, 1000 + i);
    ToDevice(dev + off, host_.data() + off, sizes[i]);
    from.push_back({{dev + off, sizes[i]}});
    into_device.push_back({{dev_back + off, sizes[i]}});
    into_host.push_back({{host_.data() + (2 << 20) + off, sizes[i]}});
    off += sizes[i];
  }
  // A key whose page is a host buffer then a GPU buffer (a layer's k and v).
  keys.push_back("mixed-page");
  tools::FillPattern(host_.data() + off, 64 * KiB, 0, 77);
  tools::FillPattern(host_.data() + off + 64 * KiB, 64 * KiB, 0, 78);
  ToDevice(dev + off + 64 * KiB, host_.data() + off + 64 * KiB, 64 * KiB);
  from.push_back({{host_.data() + off, 64 * KiB}, {dev + off + 64 * KiB, 64 * KiB}});
  into_device.push_back({{dev_back + off, 128 * KiB}});
  into_host.push_back({{host_.data() + (2 << 20) + off, 128 * KiB}});

  std::vector<Status> st;
  ASSERT_TRUE(client_->BatchPut(keys, from, &st).ok());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(st[i].ok()) << keys[i] << ": " << st[i].ToString();
  StoreStats stats = client_->Stats();
  EXPECT_EQ(stats.put_bounced, keys.size());  // every key has GPU memory no rail (tcp) exposes

  // Into GPU memory: byte-exact, and counted as not checksummed.
  std::vector<uint64_t> len;
  ASSERT_TRUE(client_->BatchGet(keys, into_device, &st, &len).ok());
  uint8_t* back = host_.data() + (2 << 20);  // the host GET below overwrites it again
  FromDevice(back, dev_back, off + 128 * KiB);
  off = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(st[i].ok()) << keys[i] << ": " << st[i].ToString();
    EXPECT_EQ(len[i], sizes[i]);
    EXPECT_EQ(tools::CheckPattern(back + off, sizes[i], 0, 1000 + i), sizes[i]) << keys[i];
    off += sizes[i];
  }
  ASSERT_TRUE(st.back().ok()) << st.back().ToString();
  EXPECT_EQ(tools::CheckPattern(back + off, 64 * KiB, 0, 77), 64 * KiB);
  EXPECT_EQ(tools::CheckPattern(back + off + 64 * KiB, 64 * KiB, 0, 78), 64 * KiB);
  EXPECT_EQ(client_->Stats().get_unverified - stats.get_unverified, keys.size());

  // Into host memory: verified as ever (none counted unverified).
  stats = client_->Stats();
  ASSERT_TRUE(client_->BatchGet(keys, into_host, &st, &len).ok());
  off = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(st[i].ok()) << keys[i] << ": " << st[i].ToString();
    EXPECT_EQ(tools::CheckPattern(host_.data() + (2 << 20) + off, sizes[i], 0, 1000 + i), sizes[i]);
    off += sizes[i];
  }
  EXPECT_EQ(client_->Stats().get_unverified, stats.get_unverified);
  EXPECT_EQ(client_->Stats().get_hits - stats.get_hits, keys.size());
}

TEST_F(GpuStoreTest, FakeDriverGpuPagesRegisteredInPlaceMoveWithoutBounceOrStaging) {
  // Rails with FI_HMEM: the homes READ (or the client WRITEs) the GPU pages
  // where they are, and GETs land in GPU memory directly; nothing goes
  // through the bounce buffer or the driver's copies.
  Start(64 * KiB, /*in_place=*/true);
  constexpr size_t kPages = 24;
  const std::vector<size_t> sizes = {128 * KiB, 100 * KiB, 4 * KiB, 77 * KiB};
  uint8_t* dev = Device(4 << 20);
  uint8_t* dev_back = Device(4 << 20);
  std::vector<std::string> keys;
  std::vector<std::vector<StoreBuffer>> from, into;
  size_t off = 0;
  for (size_t i = 0; i < kPages; ++i) {
    const size_t n = sizes[i % sizes.size()];
    keys.push_back("in-place-" + std::to_string(i));
    tools::FillPattern(dev + off, n, 0, 3000 + i);  // fake device memory is host-addressable
    from.push_back({{dev + off, n}});
    into.push_back({{dev_back + off, n}});
    off += n;
  }
  const unsigned long copies = fake_->copies();
  std::vector<Status> st;
  ASSERT_TRUE(client_->BatchPut(keys, from, &st).ok());
  for (size_t i = 0; i < kPages; ++i) ASSERT_TRUE(st[i].ok()) << keys[i] << ": " << st[i].ToString();
  const StoreStats stats = client_->Stats();
  EXPECT_EQ(stats.put_bounced, 0u);
  std::vector<uint64_t> len;
  ASSERT_TRUE(client_->BatchGet(keys, into, &st, &len).ok());
  off = 0;
  for (size_t i = 0; i < kPages; ++i) {
    const size_t n = sizes[i % sizes.size()];
    ASSERT_TRUE(st[i].ok()) << keys[i] << ": " << st[i].ToString();
    EXPECT_EQ(len[i], n);
    EXPECT_EQ(tools::CheckPattern(dev_back + off, n, 0, 3000 + i), n) << keys[i];
    off += n;
  }
  EXPECT_EQ(fake_->copies(), copies) << "GPU pages went through the driver instead of the NIC";
  EXPECT_EQ(client_->Stats().get_unverified - stats.get_unverified, kPages);
  // The GPU registrations the client made named the device.
  size_t gpu = 0;
  for (const Seen& s : fake_->SeenSince(0))
    if (s.iface == FI_HMEM_CUDA) {
      EXPECT_EQ(s.device, 0);
      ++gpu;
    }
  EXPECT_GE(gpu, 2u);
}

TEST_F(GpuStoreTest, FakeDriverAGpuPageLargerThanTheBounceBufferFailsAlone) {
  Start(64 * KiB);
  uint8_t* dev = Device(1 << 20);
  tools::FillPattern(host_.data(), 32 * KiB, 0, 5);
  ToDevice(dev, host_.data(), 32 * KiB);
  std::vector<uint8_t> unregistered(4 * KiB, 1);
  std::vector<Status> st;
  ASSERT_TRUE(client_
                  ->BatchPut({"small", "too-big", "host", "unregistered"},
                             {{{dev, 32 * KiB}}, {{dev + 64 * KiB, 128 * KiB}}, {{host_.data(), 32 * KiB}},
                              {{unregistered.data(), unregistered.size()}}},
                             &st)
                  .ok());
  EXPECT_TRUE(st[0].ok()) << st[0].ToString();
  EXPECT_EQ(st[1].code(), Status::Code::kInvalidArgument) << st[1].ToString();
  EXPECT_NE(st[1].message().find("KVF_STORE_BOUNCE_BYTES"), std::string::npos) << st[1].ToString();
  EXPECT_TRUE(st[2].ok()) << st[2].ToString();
  EXPECT_EQ(st[3].code(), Status::Code::kInvalidArgument) << st[3].ToString();
  std::vector<bool> found;
  size_t leading = 0;
  ASSERT_TRUE(client_->BatchExists({"small", "too-big", "host", "unregistered"}, &found, &leading).ok());
  EXPECT_EQ(found, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(leading, 1u);
}

}  // namespace
}  // namespace kvfabric
