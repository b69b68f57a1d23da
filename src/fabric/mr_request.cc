#include "fabric/mr_request.h"

#include "common/text.h"

namespace kvfabric::fabric {

void BuildMrRequest(const MemorySource& m, uint64_t access, uint64_t requested_key, bool use_dmabuf,
                    MrRequest* out) {
  out->attr = fi_mr_attr{};
  out->flags = 0;
  out->attr.access = access;
  out->attr.requested_key = requested_key;
  out->attr.iov_count = 1;
  out->iov = {m.addr, m.length};
  out->attr.mr_iov = &out->iov;
  if (m.cuda_device < 0) {
    out->attr.iface = FI_HMEM_SYSTEM;
    return;
  }
  out->attr.iface = FI_HMEM_CUDA;
  out->attr.device.cuda = m.cuda_device;
  if (!use_dmabuf || m.dmabuf_fd < 0) return;
  out->dmabuf = {m.dmabuf_fd, m.dmabuf_offset, m.length, static_cast<char*>(m.addr) - m.dmabuf_offset};
  // fi_mr_attr's first member is a union of mr_iov and dmabuf (1.20 and
  // later); 1.17's headers name only mr_iov.
  out->attr.mr_iov = reinterpret_cast<const iovec*>(&out->dmabuf);
  out->flags |= kMrDmabufFlag;
}

std::string Describe(const MrRequest& r) {
  if (r.attr.iface == FI_HMEM_SYSTEM) return "host";
  std::string s = text::Format("cuda:{}", r.attr.device.cuda);
  if (r.uses_dmabuf()) s += text::Format(" dma-buf fd {} +{:#x}", r.dmabuf.fd, r.dmabuf.offset);
  return s;
}

namespace {

RegAttrFn& Override() {
  static RegAttrFn fn;
  return fn;
}

}  // namespace

int RegAttr(const RegAttrCall& call, fid_domain* domain, const MrRequest& r, fid_mr** mr) {
  if (Override()) return Override()(call, domain, &r.attr, r.flags, mr);
  return fi_mr_regattr(domain, &r.attr, r.flags, mr);
}

void SetRegAttrForTesting(RegAttrFn fn) { Override() = std::move(fn); }

}  // namespace kvfabric::fabric
