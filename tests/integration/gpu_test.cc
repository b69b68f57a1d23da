// GPU memory: the CUDA driver loaded at run time, registration checks,
// same-process device copies, and clear errors where GPU memory cannot go.
//
// RealDriver* tests use the host's libcuda.so.1 and skip, saying why, where
// there is none. FakeDriver* tests load tests/support/fake_cuda.c
// (KVF_CUDA_LIBRARY), whose "device memory" is host memory it tracks, so the
// engine's CUDA paths run on any host. The driver is loaded once per process:
// ctest runs each test in its own process.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "gpu_engine.h"
#include "kvfabric/engine.h"
#include "memory/cuda.h"
#include "tools/common/pattern.h"

namespace kvfabric {
namespace {

constexpr size_t MiB = 1 << 20;

// Host -> device -> device -> host through the engine's own segment, every
// byte checked; returns the device copies the driver made (fake only).
void RoundTripThroughDevice(Engine& e, int device) {
  void* d1 = nullptr;
  void* d2 = nullptr;
  ASSERT_TRUE(memory::cuda::Alloc(device, 4 * MiB, &d1).ok());
  ASSERT_TRUE(memory::cuda::Alloc(device, 4 * MiB, &d2).ok());
  std::vector<uint8_t> host(4 * MiB), back(4 * MiB);
  tools::FillPattern(host.data(), host.size(), 0, 31);
  const std::string loc = "cuda:" + std::to_string(device);
  ASSERT_TRUE(e.RegisterMemory(d1, 4 * MiB, loc).ok());
  ASSERT_TRUE(e.RegisterMemory(d2, 4 * MiB, loc).ok());
  ASSERT_TRUE(e.RegisterMemory(host.data(), host.size()).ok());
  ASSERT_TRUE(e.RegisterMemory(back.data(), back.size()).ok());
  SegmentHandle self;
  ASSERT_TRUE(e.OpenSegment(e.name(), &self).ok());
  const auto d1a = reinterpret_cast<uint64_t>(d1), d2a = reinterpret_cast<uint64_t>(d2);
  Status s = e.Transfer({{OpCode::kWrite, host.data(), self, d1a, 4 * MiB}});  // host -> device
  ASSERT_TRUE(s.ok()) << s.ToString();
  s = e.Transfer({{OpCode::kWrite, d1, self, d2a, 4 * MiB}});  // device -> device
  ASSERT_TRUE(s.ok()) << s.ToString();
  s = e.Transfer({{OpCode::kRead, back.data(), self, d2a, 4 * MiB}});  // device -> host
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(tools::CheckPattern(back.data(), back.size(), 0, 31), back.size());
  for (void* p : {d1, d2, static_cast<void*>(host.data()), static_cast<void*>(back.data())})
    EXPECT_TRUE(e.UnregisterMemory(p).ok());
  memory::cuda::Free(d1);
  memory::cuda::Free(d2);
}

TEST(GpuTest, RealDriverSameProcessCopiesAreByteExact) {
  Status s = memory::cuda::Load();
  if (!s.ok()) GTEST_SKIP() << "no usable CUDA driver here: " << s.message();
  auto e = NewGpuTestEngine("");
  ASSERT_NE(e, nullptr);
  for (int d = 0; d < memory::cuda::DeviceCount(); ++d) RoundTripThroughDevice(*e, d);
}

TEST(GpuTest, RealDriverHostMemoryAsCudaIsRefused) {
  Status s = memory::cuda::Load();
  if (!s.ok()) GTEST_SKIP() << "no usable CUDA driver here: " << s.message();
  auto e = NewGpuTestEngine("");
  std::vector<uint8_t> host(MiB);
  s = e->RegisterMemory(host.data(), host.size(), "cuda:0");
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
}

TEST(GpuTest, FakeDriverSameProcessCopiesGoThroughTheDriver) {
  auto e = NewGpuTestEngine(KVF_FAKE_CUDA_PATH);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(memory::cuda::DeviceCount(), 2);
  void* lib = dlopen(KVF_FAKE_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  auto copies = reinterpret_cast<unsigned long (*)()>(dlsym(lib, "fake_cuda_copies"));
  ASSERT_NE(copies, nullptr);
  const unsigned long before = copies();
  RoundTripThroughDevice(*e, 1);
  EXPECT_EQ(copies() - before, 3u);  // each of the three copies was a device copy
  std::string bus;
  ASSERT_TRUE(memory::cuda::PciBusId(1, &bus).ok());
  EXPECT_EQ(bus, "0000:1b:00.0");  // lower case, as sysfs writes it
}

TEST(GpuTest, FakeDriverRegistrationChecksTheDevice) {
  auto e = NewGpuTestEngine(KVF_FAKE_CUDA_PATH);
  void* d = nullptr;
  ASSERT_TRUE(memory::cuda::Alloc(1, MiB, &d).ok());
  std::vector<uint8_t> host(MiB);
  Status s = e->RegisterMemory(d, MiB, "cuda:0");  // it is on cuda:1
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("on cuda:1"), std::string::npos) << s.ToString();
  s = e->RegisterMemory(d, MiB, "cpu:0");  // device memory as host memory
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("register it as cuda:1"), std::string::npos) << s.ToString();
  s = e->RegisterMemory(host.data(), MiB, "cuda:0");  // host memory as device memory
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  s = e->RegisterMemory(d, 2 * MiB, "cuda:1");  // runs past the allocation
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  s = e->RegisterMemory(d, MiB, "cuda:1");
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::vector<RemoteBuffer> mine;
  SegmentHandle self;
  ASSERT_TRUE(e->OpenSegment(e->name(), &self).ok());
  ASSERT_TRUE(e->GetSegmentBuffers(self, &mine).ok());
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].location, "cuda:1");
  EXPECT_TRUE(e->UnregisterMemory(d).ok());
  memory::cuda::Free(d);
}

TEST(GpuTest, FakeDriverWildcardLocationFindsTheDevice) {
  // Frameworks register CUDA tensors by raw pointer with Mooncake's default
  // location "*": the driver says which device, and host memory stays host.
  auto e = NewGpuTestEngine(KVF_FAKE_CUDA_PATH);
  void* d0 = nullptr;
  void* d1 = nullptr;
  ASSERT_TRUE(memory::cuda::Alloc(0, MiB, &d0).ok());
  ASSERT_TRUE(memory::cuda::Alloc(1, MiB, &d1).ok());
  std::vector<uint8_t> host(MiB, 1);
  Status s = e->RegisterMemoryBatch({{d0, MiB, "*"}, {d1, MiB, "*"}, {host.data(), MiB, "*"}});
  ASSERT_TRUE(s.ok()) << s.ToString();
  SegmentHandle self;
  ASSERT_TRUE(e->OpenSegment(e->name(), &self).ok());
  std::vector<RemoteBuffer> mine;
  ASSERT_TRUE(e->GetSegmentBuffers(self, &mine).ok());
  std::map<uint64_t, std::string> where;
  for (const auto& b : mine) where[b.addr] = b.location;
  EXPECT_EQ(where[reinterpret_cast<uint64_t>(d0)], "cuda:0");
  EXPECT_EQ(where[reinterpret_cast<uint64_t>(d1)], "cuda:1");
  EXPECT_EQ(where[reinterpret_cast<uint64_t>(host.data())].rfind("cpu:", 0), 0u);
  // "*" still checks the range: past the end of a device allocation is refused.
  s = e->RegisterMemory(static_cast<uint8_t*>(d0) + MiB / 2, MiB, "*");
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  for (void* p : {d0, d1, static_cast<void*>(host.data())}) EXPECT_TRUE(e->UnregisterMemory(p).ok());
  memory::cuda::Free(d0);
  memory::cuda::Free(d1);
}

TEST(GpuTest, FakeDriverGpuMemoryMovesOverTcpThroughStaging) {
  // tcp cannot register GPU memory (no FI_HMEM): the initiator's device
  // bytes travel through pinned staging slots, byte-exact both ways, with
  // more slices than slots. A peer's GPU memory stays out of reach and
  // says so.
  constexpr size_t kBytes = 24 * MiB;
  auto a = NewGpuTestEngine(KVF_FAKE_CUDA_PATH, true, 4 * MiB);  // 4 slots of 1 MiB
  auto b = NewGpuTestEngine(KVF_FAKE_CUDA_PATH);
  void* d = nullptr;
  ASSERT_TRUE(memory::cuda::Alloc(1, kBytes, &d).ok());
  auto* dev = static_cast<uint8_t*>(d);
  std::vector<uint8_t> host(kBytes), check(kBytes);
  tools::FillPattern(dev, kBytes, 0, 41);  // fake device memory is host-addressable
  ASSERT_TRUE(a->RegisterMemory(d, kBytes, "cuda:1").ok());
  ASSERT_TRUE(b->RegisterMemory(host.data(), kBytes).ok());
  SegmentHandle to_b, to_a;
  ASSERT_TRUE(a->OpenSegment(b->name(), &to_b).ok());
  ASSERT_TRUE(b->OpenSegment(a->name(), &to_a).ok());
  const auto remote = reinterpret_cast<uint64_t>(host.data());
  void* lib = dlopen(KVF_FAKE_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  auto copies = reinterpret_cast<unsigned long (*)()>(dlsym(lib, "fake_cuda_copies"));
  unsigned long before = copies();
  Status s = a->Transfer({{OpCode::kWrite, d, to_b, remote, kBytes}});  // device -> remote host
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(tools::CheckPattern(host.data(), kBytes, 0, 41), kBytes);
  EXPECT_GE(copies() - before, kBytes / MiB);  // one device copy per slot-sized slice
  tools::FillPattern(host.data(), kBytes, 0, 42);
  std::memset(dev, 0, kBytes);
  before = copies();
  s = a->Transfer({{OpCode::kRead, d, to_b, remote, kBytes}});  // remote host -> device
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(tools::CheckPattern(dev, kBytes, 0, 42), kBytes);
  EXPECT_GE(copies() - before, kBytes / MiB);
  // Many small requests in one batch, mixed directions.
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 64; ++i)
    reqs.push_back({i % 2 ? OpCode::kRead : OpCode::kWrite, dev + i * 256 * 1024, to_b, remote + i * 256 * 1024,
                    256 * 1024});
  s = a->Transfer(reqs);
  ASSERT_TRUE(s.ok()) << s.ToString();
  // The peer's GPU memory: not reachable over tcp, and the error says why.
  s = b->Transfer({{OpCode::kWrite, host.data(), to_a, reinterpret_cast<uint64_t>(d), MiB}});
  EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  EXPECT_NE(s.message().find("GPU memory"), std::string::npos) << s.ToString();
  a.reset();
  memory::cuda::Free(d);
}

TEST(GpuTest, FakeDriverStagedWritesCarryTheirNoticesByMessage) {
  // Staged pieces cannot carry remote CQ data: each WRITE's notice follows
  // it as a message, and the target takes it with the WRITE's bytes there.
  // Where only remote CQ data is allowed, such a WRITE is refused, saying why.
  constexpr size_t kBytes = 6 * MiB;
  auto a = NewGpuTestEngine(KVF_FAKE_CUDA_PATH, true, 4 * MiB);
  auto b = NewGpuTestEngine(KVF_FAKE_CUDA_PATH);
  void* d = nullptr;
  ASSERT_TRUE(memory::cuda::Alloc(1, kBytes, &d).ok());
  auto* dev = static_cast<uint8_t*>(d);
  std::vector<uint8_t> host(kBytes);
  tools::FillPattern(dev, kBytes, 0, 43);
  ASSERT_TRUE(a->RegisterMemory(d, kBytes, "cuda:1").ok());
  ASSERT_TRUE(b->RegisterMemory(host.data(), kBytes).ok());
  SegmentHandle to_b;
  ASSERT_TRUE(a->OpenSegment(b->name(), &to_b).ok());
  const auto remote = reinterpret_cast<uint64_t>(host.data());
  std::vector<TransferRequest> reqs;
  for (uint16_t n = 1; n <= 3; ++n) {
    reqs.push_back({OpCode::kWrite, dev + (n - 1) * 2 * MiB, to_b, remote + (n - 1) * 2 * MiB, 2 * MiB});
    reqs.back().notice = n;
  }
  Status s = a->Transfer(reqs);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<uint16_t> got;
  for (int i = 0; i < 3 && got.size() < 3; ++i) {
    std::vector<uint16_t> more;
    ASSERT_TRUE(b->WaitNotices(5000, &more).ok());
    got.insert(got.end(), more.begin(), more.end());
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<uint16_t>{1, 2, 3}));
  EXPECT_EQ(tools::CheckPattern(host.data(), kBytes, 0, 43), kBytes);
  EngineStats stats;
  ASSERT_TRUE(a->Stats(&stats).ok());
  EXPECT_EQ(stats.notice_messages_sent, 3u);

  auto strict = NewGpuTestEngine(KVF_FAKE_CUDA_PATH, true, 4 * MiB, "cq_data");
  ASSERT_TRUE(a->UnregisterMemory(d).ok());
  ASSERT_TRUE(strict->RegisterMemory(d, kBytes, "cuda:1").ok());
  SegmentHandle strict_to_b;
  ASSERT_TRUE(strict->OpenSegment(b->name(), &strict_to_b).ok());
  reqs.resize(1);
  reqs[0].target = strict_to_b;
  s = strict->Transfer(reqs);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("KVF_NOTICE_PATH=cq_data"), std::string::npos) << s.ToString();
  strict.reset();
  a.reset();
  memory::cuda::Free(d);
}

TEST(GpuTest, NoDriverRefusesGpuMemoryAndKeepsHostMemoryWorking) {
  auto e = NewGpuTestEngine("/nonexistent/libcuda.so.1");
  ASSERT_NE(e, nullptr);
  std::vector<uint8_t> buf(2 * MiB);
  Status s = e->RegisterMemory(buf.data(), MiB, "cuda:0");
  EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  EXPECT_NE(s.message().find("not found"), std::string::npos) << s.ToString();
  ASSERT_TRUE(e->RegisterMemory(buf.data(), buf.size()).ok());
  SegmentHandle self;
  ASSERT_TRUE(e->OpenSegment(e->name(), &self).ok());
  tools::FillPattern(buf.data(), MiB, 0, 9);
  ASSERT_TRUE(e->Transfer({{OpCode::kWrite, buf.data(), self, reinterpret_cast<uint64_t>(buf.data()) + MiB, MiB}}).ok());
  EXPECT_EQ(tools::CheckPattern(buf.data() + MiB, MiB, 0, 9), MiB);
  // libfabric was told not to initialize CUDA.
  const char* hmem = getenv("FI_HMEM");
  ASSERT_NE(hmem, nullptr);
  EXPECT_STREQ(hmem, "system");
}

TEST(GpuTest, CudaOffRefusesGpuMemory) {
  auto e = NewGpuTestEngine(KVF_FAKE_CUDA_PATH, /*cuda=*/false);
  std::vector<uint8_t> buf(MiB);
  Status s = e->RegisterMemory(buf.data(), MiB, "cuda:0");
  EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  EXPECT_NE(s.message().find("KVF_CUDA=0"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace kvfabric
