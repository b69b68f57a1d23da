// Choosing libfabric providers and domains (one domain = one rail = one NIC).
#pragma once

#include <rdma/fabric.h>

#include <memory>
#include <string>
#include <vector>

#include "fabric/rail_info.h"
#include "kvfabric/status.h"

namespace kvfabric::fabric {

// The libfabric API version we request: the newest the headers know, but
// never above what the loaded library implements. EFA needs >= 1.18 for
// device RDMA on p5/p5e; `kvfabric doctor` warns when we run below that.
uint32_t ApiVersion();

// Whether the provider registers GPU memory on the rail `info` opens: it
// granted FI_HMEM (or a test's FakeAnswers do, when it was `asked`).
bool HmemGranted(const fi_info* info, bool asked);

// Whether GPU memory may be registered by dma-buf: the API version we
// request is 1.20 or later, so both the headers built against and the
// library loaded know FI_MR_DMABUF (a build against Debian's 1.17 headers
// never uses it; one against /opt/amazon/efa does where the library allows).
bool DmabufOffered();

// Answers a test puts in libfabric's mouth, on a host without the providers
// or library they concern. For tests only.
struct FakeAnswers {
  bool hmem = false;          // every rail that asked for FI_HMEM has it (HmemGranted)
  uint32_t api_version = 0;   // DmabufOffered() decides as if this were ApiVersion(); 0: the real one
};
void SetFakeAnswersForTesting(const FakeAnswers& answers);

// Provider environment defaults kvfabric wants (KVF_RXM_FAST_CONNECT), set
// with setenv(..., overwrite=0) so a user's own values win. Only effective
// before libfabric first initializes in the process; call before fi_getinfo.
// With `host_memory_only`, FI_HMEM=system: no provider initializes CUDA;
// without, FI_EFA_ENABLE_SHM_TRANSFER=0 (libfabric issue 12328: EFA's
// same-host shm path wrote host bytes into CUDA destinations).
void ApplyProviderDefaults(bool rxm_fast_connect, bool host_memory_only, bool av_remove_cleanup);

// "tcp" -> "tcp;ofi_rxm", "verbs" -> "verbs;ofi_rxm", "efa", "shm", "sockets".
// "rdma" (what Mooncake users pass) is the RDMA fabric this host has: efa
// where the efa provider finds a device, else verbs; one info line says
// which. Unknown names are an InvalidArgument listing the accepted ones.
Status ProviderForProtocol(const std::string& protocol, std::string* provider);

// The domain a user's device name means, among `domains` of `provider`:
//  - the domain of that exact name ("rdmap79s0-rdm", "mlx5_0", "eth0");
//  - an EFA ibverbs device name ("rdmap79s0") -> its RDM domain "rdmap79s0-rdm";
//  - for socket providers (tcp, sockets), an ibverbs device name ("mlx5_0")
//    -> the network interface it carries, read from
//    <sysfs_root>/class/infiniband/<name>/device/net/<ifname>.
// Returns "" when none matches. Pure but for that sysfs read.
std::string DomainForDevice(const std::string& device, const std::vector<std::string>& domains,
                            const std::string& provider, const std::string& sysfs_root = "/sys");

// Whether connections may be closed to end a peer's operations
// (Rail::CutPeer) for a request past its deadline or expired, by
// KVF_CLOSE_CONNECTIONS (`mode`: auto, on, off): all but 'off'.
bool MayCloseConnections(const std::string& mode);
// Whether a stalled rail may close connections before its posted
// operations move, by the same `mode` and the loaded libfabric's `version`
// (fi_version()): 'on' yes, 'off' no, 'auto' from libfabric 1.18. Before
// it, the tcp provider keeps a READ whose bytes are arriving both in its
// read queue and as its current receive, and closing the endpoint then
// frees it twice (tcpx_ep_flush_all_queues): a stalled link is cut while
// bytes arrive, and a rail crashed here so. (A deadline's cut meets the
// same bug only when a hung peer stopped in the middle of a response;
// not closing then lets the READ land later, in memory that may be freed:
// a store test crashed so. 'auto' keeps those cuts.)
bool MayCloseStalledConnections(const std::string& mode, uint32_t version);

// Whether removing an address from an AV closes rxm's connection to it
// (FI_AV_REMOVE_CLEANUP on, as libfabric reads it at its start:
// InfoList::Query calls this before its first fi_getinfo; ApplyProviderDefaults
// sets the variable when MayCloseConnections, unless the user set it).
bool AvRemoveClosesConnections();

// Owns an fi_getinfo result and exposes the usable entries: one per
// (domain, fabric), IPv4 for socket-based providers (tcp;ofi_rxm returns every
// interface several times and ignores the domain we ask for).
class InfoList {
 public:
  InfoList() = default;
  ~InfoList();
  InfoList(const InfoList&) = delete;
  InfoList& operator=(const InfoList&) = delete;
  InfoList(InfoList&& o) noexcept { *this = std::move(o); }
  InfoList& operator=(InfoList&& o) noexcept {
    std::swap(head_, o.head_);
    std::swap(entries_, o.entries_);
    return *this;
  }

  // With `hmem`, FI_HMEM and FI_MR_HMEM are asked for first (GPU memory
  // registered in place), and where the provider has no such domain, asked
  // again without: its rails then carry GPU memory through staging.
  static Status Query(const std::string& provider, InfoList* out, bool hmem = false);
  const std::vector<fi_info*>& entries() const { return entries_; }

 private:
  fi_info* head_ = nullptr;
  std::vector<fi_info*> entries_;
};

// Whether fi_getinfo finds at least one usable domain of the provider.
bool ProviderAvailable(const std::string& provider);

// Picks the rails of one provider:
//  - a non-empty `nic_filter` (comma-separated device or domain names, see
//    DomainForDevice; blanks around names ignored) keeps exactly those, and
//    an unknown name is a NotFound that lists the domains that exist;
//  - else EFA/verbs/shm keep every domain, and socket providers keep the
//    interface that carries `bind_ip` (loopback for 127.0.0.1), or the first
//    non-loopback interface when none does.
Status SelectDomains(const InfoList& infos, const std::string& nic_filter,
                     const std::string& bind_ip, std::vector<fi_info*>* out);

// What `info` says of the rail it would open: provider, domain, fabric and
// FI_MR_VIRT_ADDR (tx_depth and max_msg_size are decided by Rail::Open).
RailInfo RailInfoOf(const fi_info* info);

// IPv4 address of an fi_info's source address, or "" for other formats.
std::string SourceIp(const fi_info* info);

}  // namespace kvfabric::fabric
