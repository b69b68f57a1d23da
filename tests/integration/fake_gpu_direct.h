// FakeGpuDirect: GPU memory registered in place (FI_HMEM), as on EFA, on a
// host without GPU or EFA. The fake CUDA driver (tests/support/fake_cuda.c)
// hands out "device memory" that is host memory; libfabric's answers are
// faked to grant FI_HMEM to rails that ask (fabric::SetFakeAnswersForTesting);
// and the one seam at the libfabric boundary for registrations
// (fabric::SetRegAttrForTesting) records each request, checks the dma-buf it
// names, and registers the same bytes as host memory so they really move.
// What this cannot show is a NIC's DMA into a GPU: tests/hw/ runs that.
#pragma once

#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <rdma/fi_errno.h>

#include <mutex>
#include <vector>

#include "fabric/fabric_info.h"
#include "fabric/mr_request.h"
#include "memory/cuda.h"

namespace kvfabric {

// One registration as the seam saw it.
struct Seen {
  size_t rail = 0;
  fi_hmem_iface iface = FI_HMEM_SYSTEM;
  int device = -1;
  bool dmabuf = false;
  uintptr_t addr = 0;  // the bytes registered (device address or base + offset)
  size_t length = 0;
  uintptr_t dmabuf_alloc = 0;  // the allocation the fd exports (fake driver's record)
  size_t dmabuf_alloc_length = 0;
  uint64_t dmabuf_offset = 0;
  uintptr_t dmabuf_base = 0;
};

// Install before creating engines; the destructor puts libfabric back.
class FakeGpuDirect {
 public:
  // `api_version`: as if libfabric were that version (0: the real one, 1.17
  // here); `refuse_dmabuf`: the provider refuses dma-buf registrations.
  explicit FakeGpuDirect(uint32_t api_version, bool refuse_dmabuf = false) {
    EXPECT_TRUE(memory::cuda::Load(KVF_FAKE_CUDA_PATH).ok());
    void* lib = dlopen(KVF_FAKE_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
    EXPECT_NE(lib, nullptr);
    copies_ = reinterpret_cast<unsigned long (*)()>(dlsym(lib, "fake_cuda_copies"));
    exports_ = reinterpret_cast<unsigned long (*)()>(dlsym(lib, "fake_cuda_dmabuf_exports"));
    dmabuf_range_ = reinterpret_cast<int (*)(int, uintptr_t*, size_t*)>(dlsym(lib, "fake_cuda_dmabuf_range"));
    EXPECT_TRUE(copies_ && exports_ && dmabuf_range_);
    fabric::SetFakeAnswersForTesting({/*hmem=*/true, api_version});
    fabric::SetRegAttrForTesting([this, refuse_dmabuf](const fabric::RegAttrCall& call, fid_domain* domain,
                                                       const fi_mr_attr* attr, uint64_t flags, fid_mr** mr) {
      Seen s;
      s.rail = call.rail;
      s.iface = attr->iface;
      s.dmabuf = (flags & fabric::kMrDmabufFlag) != 0;
      if (attr->iface == FI_HMEM_CUDA) s.device = attr->device.cuda;
      if (s.dmabuf) {
        const auto* d = reinterpret_cast<const fabric::MrDmabuf*>(attr->mr_iov);
        s.addr = reinterpret_cast<uintptr_t>(d->base_addr) + d->offset;
        s.length = d->len;
        s.dmabuf_offset = d->offset;
        s.dmabuf_base = reinterpret_cast<uintptr_t>(d->base_addr);
        EXPECT_TRUE(dmabuf_range_(d->fd, &s.dmabuf_alloc, &s.dmabuf_alloc_length)) << "fd " << d->fd;
        EXPECT_NE(fcntl(d->fd, F_GETFD), -1) << "the dma-buf fd was closed before the registration";
      } else {
        s.addr = reinterpret_cast<uintptr_t>(attr->mr_iov[0].iov_base);
        s.length = attr->mr_iov[0].iov_len;
      }
      {
        std::lock_guard<std::mutex> g(mu_);
        seen_.push_back(s);
      }
      if (s.dmabuf && refuse_dmabuf) return -FI_EOPNOTSUPP;
      // The fake device memory is host memory: register it as such.
      fi_mr_attr host = *attr;
      iovec iov{reinterpret_cast<void*>(s.addr), s.length};
      host.mr_iov = &iov;
      host.iov_count = 1;
      host.iface = FI_HMEM_SYSTEM;
      host.device.reserved = 0;
      return fi_mr_regattr(domain, &host, flags & ~fabric::kMrDmabufFlag, mr);
    });
  }
  ~FakeGpuDirect() {
    fabric::SetRegAttrForTesting(nullptr);
    fabric::SetFakeAnswersForTesting({});
  }
  FakeGpuDirect(const FakeGpuDirect&) = delete;
  FakeGpuDirect& operator=(const FakeGpuDirect&) = delete;

  // Registrations seen from the `from`th on.
  std::vector<Seen> SeenSince(size_t from) {
    std::lock_guard<std::mutex> g(mu_);
    return {seen_.begin() + static_cast<long>(std::min(from, seen_.size())), seen_.end()};
  }
  size_t SeenCount() {
    std::lock_guard<std::mutex> g(mu_);
    return seen_.size();
  }
  // Copies through the driver (staging, device copies) so far.
  unsigned long copies() const { return copies_(); }
  // dma-bufs the driver exported so far.
  unsigned long exports() const { return exports_(); }

 private:
  std::mutex mu_;
  std::vector<Seen> seen_;
  unsigned long (*copies_)() = nullptr;
  unsigned long (*exports_)() = nullptr;
  int (*dmabuf_range_)(int, uintptr_t*, size_t*) = nullptr;
};

}  // namespace kvfabric
