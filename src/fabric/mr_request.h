// MrRequest: what one memory registration asks of libfabric (the
// fi_mr_attr and flags of one fi_mr_regattr call), built by a pure function
// from what the memory is. Host memory and GPU memory differ only here:
// GPU memory names its interface (FI_HMEM_CUDA) and device ordinal, and,
// where the loaded libfabric and the driver allow it, arrives as a dma-buf
// file descriptor instead of a device address (fi_mr(3), "dmabuf").
//
// The registration call itself goes through RegAttr(), the one seam at the
// libfabric boundary for memory: tests replace it (SetRegAttrForTesting) to
// see every request and to stand in for providers and drivers this host
// lacks.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace kvfabric::fabric {

// struct fi_mr_dmabuf and FI_MR_DMABUF (libfabric 1.20, fi_domain.h),
// declared here because Debian's 1.17 headers have neither. A registration
// may use them only when the API version requested is 1.20 or later
// (ApiVersion(): never above the headers), which is when libfabric reads
// the field (ofi_mr_update_attr).
struct MrDmabuf {
  int fd;
  uint64_t offset;
  size_t len;
  void* base_addr;
};
inline constexpr uint64_t kMrDmabufFlag = 1ULL << 40;
inline constexpr uint32_t kDmabufApiVersion = FI_VERSION(1, 20);
#ifdef FI_MR_DMABUF
static_assert(FI_MR_DMABUF == kMrDmabufFlag);
static_assert(sizeof(fi_mr_dmabuf) == sizeof(MrDmabuf));
#endif

// What is registered.
struct MemorySource {
  void* addr = nullptr;
  size_t length = 0;
  int cuda_device = -1;        // CUDA device ordinal of GPU memory; -1 for host memory
  int dmabuf_fd = -1;          // a dma-buf exporting the allocation holding it, or -1
  uint64_t dmabuf_offset = 0;  // offset of `addr` within that dma-buf
};

// The attributes of one registration. Not copyable: attr points into it.
struct MrRequest {
  MrRequest() = default;
  MrRequest(const MrRequest&) = delete;
  MrRequest& operator=(const MrRequest&) = delete;

  fi_mr_attr attr{};
  uint64_t flags = 0;
  iovec iov{};
  MrDmabuf dmabuf{};

  bool uses_dmabuf() const { return (flags & kMrDmabufFlag) != 0; }
};

// Fills `out` for registering `m` with `access` (FI_READ, FI_REMOTE_WRITE,
// ...) and `requested_key` (ignored by providers with FI_MR_PROV_KEY):
//  - host memory (cuda_device < 0): iface FI_HMEM_SYSTEM, one iovec;
//  - GPU memory: iface FI_HMEM_CUDA, device.cuda = the ordinal, and
//    - with `use_dmabuf` and a dma-buf (dmabuf_fd >= 0): flag FI_MR_DMABUF
//      and {fd, offset, length, base_addr = addr - offset}, the dma-buf's
//      start as this process maps it (FI_MR_VIRT_ADDR providers key remote
//      addresses by it);
//    - else one iovec of the device address.
// REQUIRES: m.addr != nullptr, m.length > 0.
void BuildMrRequest(const MemorySource& m, uint64_t access, uint64_t requested_key, bool use_dmabuf,
                    MrRequest* out);

// One line for logs and errors: "cuda:1 dma-buf fd 7 +0x2000" / "host".
std::string Describe(const MrRequest& r);

// What the seam is told besides the attributes: which rail registers.
struct RegAttrCall {
  size_t rail = 0;
  std::string rail_label;
};
using RegAttrFn = std::function<int(const RegAttrCall&, fid_domain*, const fi_mr_attr*, uint64_t flags, fid_mr**)>;

// fi_mr_regattr, or the function a test installed.
int RegAttr(const RegAttrCall& call, fid_domain* domain, const MrRequest& r, fid_mr** mr);

// Replaces fi_mr_regattr for every later registration in this process (an
// empty function restores it). For tests only; not thread-safe against
// registrations running meanwhile.
void SetRegAttrForTesting(RegAttrFn fn);

}  // namespace kvfabric::fabric
