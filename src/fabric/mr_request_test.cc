#include "fabric/mr_request.h"

#include <gtest/gtest.h>

namespace kvfabric::fabric {
namespace {

constexpr uint64_t kAccess = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

TEST(MrRequestTest, HostMemoryIsOneSystemIovec) {
  alignas(64) static char buf[8192];
  MrRequest r;
  BuildMrRequest({buf, sizeof(buf)}, kAccess, 77, /*use_dmabuf=*/true, &r);
  EXPECT_EQ(r.attr.iface, FI_HMEM_SYSTEM);
  EXPECT_EQ(r.flags, 0u);
  ASSERT_EQ(r.attr.iov_count, 1u);
  EXPECT_EQ(r.attr.mr_iov, &r.iov);
  EXPECT_EQ(r.iov.iov_base, buf);
  EXPECT_EQ(r.iov.iov_len, sizeof(buf));
  EXPECT_EQ(r.attr.access, kAccess);
  EXPECT_EQ(r.attr.requested_key, 77u);
  EXPECT_EQ(Describe(r), "host");
}

TEST(MrRequestTest, GpuMemoryWithoutDmabufNamesTheDeviceAddress) {
  auto* dev = reinterpret_cast<void*>(uintptr_t{0x7f0000200000});
  MrRequest r;
  // A dma-buf exists, but the rail may not use it (library below 1.20).
  BuildMrRequest({dev, 1 << 20, /*cuda_device=*/3, /*dmabuf_fd=*/9, /*dmabuf_offset=*/0x1000}, kAccess, 0, false, &r);
  EXPECT_EQ(r.attr.iface, FI_HMEM_CUDA);
  EXPECT_EQ(r.attr.device.cuda, 3);
  EXPECT_EQ(r.flags & kMrDmabufFlag, 0u);
  EXPECT_EQ(r.attr.mr_iov, &r.iov);
  EXPECT_EQ(r.iov.iov_base, dev);
  EXPECT_EQ(r.iov.iov_len, size_t{1} << 20);
  EXPECT_EQ(Describe(r), "cuda:3");
  // Allowed, but the driver exported none.
  BuildMrRequest({dev, 1 << 20, 3, -1, 0}, kAccess, 0, true, &r);
  EXPECT_FALSE(r.uses_dmabuf());
  EXPECT_EQ(r.iov.iov_base, dev);
}

TEST(MrRequestTest, GpuMemoryByDmabufCarriesFdOffsetLengthAndBase) {
  auto* base = reinterpret_cast<char*>(uintptr_t{0x7f0000200000});
  MrRequest r;
  BuildMrRequest({base + 0x3000, 0x5000, 1, 12, 0x3000}, kAccess, 5, true, &r);
  EXPECT_EQ(r.attr.iface, FI_HMEM_CUDA);
  EXPECT_EQ(r.attr.device.cuda, 1);
  EXPECT_EQ(r.flags, kMrDmabufFlag);
  EXPECT_TRUE(r.uses_dmabuf());
  // The union's first member points at the dma-buf description.
  ASSERT_EQ(static_cast<const void*>(r.attr.mr_iov), static_cast<const void*>(&r.dmabuf));
  EXPECT_EQ(r.attr.iov_count, 1u);
  EXPECT_EQ(r.dmabuf.fd, 12);
  EXPECT_EQ(r.dmabuf.offset, 0x3000u);
  EXPECT_EQ(r.dmabuf.len, 0x5000u);
  EXPECT_EQ(r.dmabuf.base_addr, base);
  EXPECT_EQ(r.attr.requested_key, 5u);
  EXPECT_EQ(Describe(r), "cuda:1 dma-buf fd 12 +0x3000");
}

TEST(MrRequestTest, RebuildingClearsWhatTheLastRequestSet) {
  auto* base = reinterpret_cast<char*>(uintptr_t{0x7f0000200000});
  alignas(64) static char host[64];
  MrRequest r;
  BuildMrRequest({base, 4096, 0, 4, 0}, kAccess, 0, true, &r);
  ASSERT_TRUE(r.uses_dmabuf());
  BuildMrRequest({host, sizeof(host)}, FI_READ | FI_WRITE, 0, true, &r);
  EXPECT_EQ(r.flags, 0u);
  EXPECT_EQ(r.attr.iface, FI_HMEM_SYSTEM);
  EXPECT_EQ(r.attr.device.reserved, 0u);
  EXPECT_EQ(r.attr.mr_iov, &r.iov);
  EXPECT_EQ(r.attr.access, uint64_t{FI_READ | FI_WRITE});
}

}  // namespace
}  // namespace kvfabric::fabric
