// Rail: opening and closing its libfabric objects, and memory registration.
// Its peers are in rail_peers.cc, posting and completions in
// rail_posting.cc, stall handling in rail_stall.cc.
#include "fabric/rail.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sys/uio.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/log.h"
#include "common/text.h"
#include "fabric/completion_error.h"
#include "fabric/fabric_info.h"
#include "fabric/shm_regions.h"

namespace kvfabric::fabric {
namespace {

std::string FiError(const char* call, int rc) {
  return text::Format("{} failed: {} ({})", call, fi_strerror(-rc), rc);
}

void CloseFid(fid* f) {
  if (f != nullptr) fi_close(f);
}

// Providers whose fi_write/fi_read hand a descriptor to a NIC: posting is
// cheap, so the submitting thread posts. The others (tcp, sockets, shm) copy
// the data inside the post call under the provider's endpoint lock, which the
// progress thread would then wait for, so the progress thread posts there
// (measured: docs/results/engine-loopback-2026-11-21.md, "Who posts").
bool PostsToHardware(const std::string& provider) {
  return provider.rfind("efa", 0) == 0 || provider.rfind("verbs", 0) == 0;
}

// Providers on which removing an address from the AV closes the connection
// to it, and fails the operations posted on it (rxm, with
// FI_AV_REMOVE_CLEANUP: the code path of a peer that shut down).
bool RemovalClosesConnections(const std::string& provider) {
  const std::string rxm = ";ofi_rxm";
  return provider.size() > rxm.size() && provider.compare(provider.size() - rxm.size(), rxm.size(), rxm) == 0;
}


}  // namespace

std::string Rail::NameShmEndpoint() {
  if (info_.provider != "shm") return std::string();
  // The region's file in /dev/shm takes this name (see shm_regions.h).
  std::string name = ShmEndpointName();
  free(info_copy_->src_addr);
  info_copy_->src_addr = strdup(name.c_str());
  info_copy_->src_addrlen = info_copy_->src_addr != nullptr ? name.size() + 1 : 0;
  return name;
}

void Rail::ClosePeerEndpointLocked(fid_ep* ep) {
  fi_close(&ep->fid);
  // An open hold would keep the unlinked region's 16 MiB alive.
  peer_holds_.erase(ep);
}

void Rail::HoldShmRegion(const std::string& name, ShmRegionHold* hold) {
  if (name.empty()) return;
  std::string why;
  if (!hold->Take("/dev/shm", name, &why))
    KVF_LOG_WARN("{}: cannot hold the shm region {} ({}); another kvfabric process may remove its file once this "
                 "process is out of its sight (another pid namespace), and new peers then fail to connect",
                 label_, name, why);
}

MemoryRegion::~MemoryRegion() { CloseFid(mr_ ? &mr_->fid : nullptr); }

Rail::Rail(const fi_info* info, const RailOptions& options, size_t index)
    : index_(index),
      info_(RailInfoOf(info)),
      label_(text::RailLabel(index, info_.provider, info_.domain)),
      health_(options.stall_period.count(), options.retry_period.count()),
      refused_ns_(options.refused_period.count()),
      post_burst_ns_(options.post_burst.count()),
      peers_(label_) {
  per_peer_ep_ = info_.provider == "shm";
  cuts_connections_ =
      options.close_connections && RemovalClosesConnections(info_.provider) && AvRemoveClosesConnections();
  cuts_stalled_connections_ = cuts_connections_ && options.close_stalled_connections;
  post_from_progress_ = options.post_mode == PostMode::kProgress ||
                        (options.post_mode == PostMode::kAuto && !PostsToHardware(info_.provider));
  // FI_MR_LOCAL needs no flag: every post passes the local MR descriptor.
  prov_key_ = (info->domain_attr->mr_mode & FI_MR_PROV_KEY) != 0;
  hmem_ = HmemGranted(info, options.hmem);
  dmabuf_ = hmem_ && DmabufOffered();
  const size_t key_size = info->domain_attr->mr_key_size;
  key_mask_ = key_size == 0 || key_size >= 8 ? ~0ull : (1ull << (8 * key_size)) - 1;
  cq_data_size_ = info->domain_attr->cq_data_size;
  write_flags_ = options.write_completion == WriteCompletion::kDelivery ? FI_COMPLETION | FI_DELIVERY_COMPLETE
                                                                        : FI_COMPLETION;
}

Status Rail::Open(const fi_info* info, const RailOptions& options, size_t index,
                  std::unique_ptr<Rail>* out) {
  std::unique_ptr<Rail> r(new Rail(info, options, index));
  const uint64_t mr_mode = info->domain_attr->mr_mode;
  if (mr_mode & FI_MR_ENDPOINT)
    return Status::Unavailable(r->label_ + ": provider requires FI_MR_ENDPOINT, which kvfabric does not offer");
  size_t depth = info->tx_attr->size;
  if (options.tx_depth > 0 && options.tx_depth < depth) depth = options.tx_depth;
  if (depth == 0) depth = 64;
  size_t max_msg = info->ep_attr->max_msg_size;
  if (options.max_slice_bytes > 0 && options.max_slice_bytes < max_msg) max_msg = options.max_slice_bytes;
  r->info_.max_msg_size = max_msg;
  if (r->info_.provider == "shm") {
    RemoveStaleShmRegionsOfThisPid();
    RemoveAbandonedShmRegionsOnce();
  }
  KVF_RETURN_IF_ERROR(r->OpenDomain(info));
  KVF_RETURN_IF_ERROR(r->OpenCq(options, &depth));
  KVF_RETURN_IF_ERROR(r->OpenEndpoint(info, options));
  r->contexts_.reset(new OpContext[depth]);
  r->free_.reserve(depth);
  for (size_t i = 0; i < depth; ++i) r->free_.push_back(&r->contexts_[depth - 1 - i]);
  KVF_LOG_INFO("opened {}: fabric {}, tx depth {}, largest message {}, mr_mode {:#x}{}{}", r->label_,
               r->info_.fabric, depth, text::Bytes(max_msg), mr_mode,
               r->wait_fd_ >= 0 ? ", waitable CQ" : ", polled CQ",
               r->info_.provider == "efa" ? ", RMA " + DescribeRma(r->efa_report_) : "");
  *out = std::move(r);
  return Status::OK();
}

Status Rail::OpenDomain(const fi_info* info) {
  info_copy_ = fi_dupinfo(info);
  if (info_copy_ == nullptr) return Status::FabricError(label_ + ": fi_dupinfo failed (out of memory)");
  int rc = fi_fabric(info->fabric_attr, &fabric_, nullptr);
  if (rc) return Status::FabricError(label_ + ": " + FiError("fi_fabric", rc));
  rc = fi_domain(fabric_, const_cast<fi_info*>(info), &domain_, nullptr);
  if (rc) return Status::FabricError(label_ + ": " + FiError("fi_domain", rc));
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  rc = fi_av_open(domain_, &av_attr, &av_, nullptr);
  if (rc) return Status::FabricError(label_ + ": " + FiError("fi_av_open", rc));
  return Status::OK();
}

Status Rail::OpenCq(const RailOptions& options, size_t* depth) {
  // A waitable CQ lets an idle progress thread sleep in epoll instead of
  // spinning (on 2 cores a blocking waiter beats busy polling); shm has none.
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;
  cq_attr.size = options.cq_size > 0 ? options.cq_size : *depth;
  cq_attr.wait_obj = FI_WAIT_FD;
  int rc = fi_cq_open(domain_, &cq_attr, &cq_, nullptr);
  if (rc != 0) {
    cq_attr.wait_obj = FI_WAIT_NONE;
    rc = fi_cq_open(domain_, &cq_attr, &cq_, nullptr);
  }
  if (rc) return Status::FabricError(label_ + ": " + FiError("fi_cq_open", rc));
  if (cq_attr.wait_obj == FI_WAIT_FD && fi_control(&cq_->fid, FI_GETWAIT, &wait_fd_) != 0) wait_fd_ = -1;
  // Never allow more operations in flight than the CQ can hold.
  if (cq_attr.size > 0 && cq_attr.size < *depth) *depth = cq_attr.size;
  info_.tx_depth = *depth;
  return Status::OK();
}

void Rail::OpenRemoteCounter() {
  // Counts peers' READs and WRITEs of this endpoint's memory; without it a
  // passive target's progress thread cannot tell it is serving.
  fi_cntr_attr cntr_attr{};
  cntr_attr.events = FI_CNTR_EVENTS_COMP;
  cntr_attr.wait_obj = FI_WAIT_NONE;
  int rc = fi_cntr_open(domain_, &cntr_attr, &remote_cntr_, nullptr);
  if (rc == 0) rc = fi_ep_bind(ep_, &remote_cntr_->fid, FI_REMOTE_READ | FI_REMOTE_WRITE);
  if (rc == 0) return;
  KVF_LOG_DEBUG("{}: no remote-access counter ({}); an idle target polls on its own schedule", label_,
                fi_strerror(-rc));
  CloseFid(remote_cntr_ ? &remote_cntr_->fid : nullptr);
  remote_cntr_ = nullptr;
}

Status Rail::OpenEndpoint(const fi_info* info, const RailOptions& options) {
  const std::string shm_name = NameShmEndpoint();
  int rc = fi_endpoint(domain_, info_copy_, &ep_, nullptr);
  if (rc) return Status::FabricError(label_ + ": " + FiError("fi_endpoint", rc));
  rc = fi_ep_bind(ep_, &av_->fid, 0);
  if (rc) return Status::FabricError(label_ + ": " + FiError("fi_ep_bind(av)", rc));
  rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV);
  if (rc) return Status::FabricError(label_ + ": " + FiError("fi_ep_bind(cq)", rc));
  if (info->caps & FI_RMA_EVENT) OpenRemoteCounter();
  const bool efa = info_.provider == "efa";
  const OptionCalls calls{
      [ep = ep_](int name, const void* v, size_t len) { return fi_setopt(&ep->fid, FI_OPT_ENDPOINT, name, v, len); },
      [ep = ep_](int name, void* v, size_t* len) { return fi_getopt(&ep->fid, FI_OPT_ENDPOINT, name, v, len); }};
  if (efa) SetEfaOptionsBeforeEnable(calls, options.efa_rnr_retry, &efa_report_);
  rc = fi_enable(ep_);
  if (rc) return Status::FabricError(label_ + ": " + FiError("fi_enable", rc));
  HoldShmRegion(shm_name, &main_hold_);
  if (efa) {
    ReadEfaEmulation(calls, &efa_report_);
    for (const std::string& w : efa_report_.warnings) KVF_LOG_WARN("{}: {}", label_, w);
  }
  char name[256];
  size_t len = sizeof(name);
  rc = fi_getname(&ep_->fid, name, &len);
  if (rc) return Status::FabricError(label_ + ": " + FiError("fi_getname", rc));
  address_.assign(name, len);
  return Status::OK();
}

Rail::~Rail() {
  CloseFid(ep_ ? &ep_->fid : nullptr);
  CloseFid(remote_cntr_ ? &remote_cntr_->fid : nullptr);
  // Queued and in-flight slices hold registrations alive: release them while
  // the domain is still open.
  for (fid_ep* ep : peers_.TakeEndpoints()) ClosePeerEndpointLocked(ep);
  main_hold_ = ShmRegionHold();
  pending_.clear();
  contexts_.reset();
  if (info_copy_ != nullptr) fi_freeinfo(info_copy_);
  CloseFid(cq_ ? &cq_->fid : nullptr);
  CloseFid(av_ ? &av_->fid : nullptr);
  CloseFid(domain_ ? &domain_->fid : nullptr);
  CloseFid(fabric_ ? &fabric_->fid : nullptr);
}

Status Rail::RegisterMemory(const MemorySource& m, std::unique_ptr<MemoryRegion>* out, PeerAccess peers) {
  const bool device = m.cuda_device >= 0;
  if (device && !hmem_)
    return Status::InvalidArgument(text::Format("{}: GPU memory of cuda:{} cannot be registered here (no FI_HMEM)",
                                                label_, m.cuda_device));
  auto mr = std::make_unique<MemoryRegion>();
  const uint64_t access = FI_READ | FI_WRITE | (peers == PeerAccess::kNone ? 0 : FI_REMOTE_READ) |
                          (peers == PeerAccess::kReadWrite ? FI_REMOTE_WRITE : 0);
  const RegAttrCall call{index_, label_};
  MrRequest req;
  // Without FI_MR_PROV_KEY the application chooses keys, unique per domain:
  // random over the provider's key size, so a client that can reach the
  // rail's port cannot guess one (docs/security.md). A key already in use
  // (-FI_ENOKEY) draws again.
  int rc = 0;
  for (int attempt = 0; attempt < 8; ++attempt) {
    uint64_t requested = 0;
    while (!prov_key_ && requested == 0) requested = crypto::RandomU64() & key_mask_;
    BuildMrRequest(m, access, requested, dmabuf(), &req);
    rc = RegAttr(call, domain_, req, &mr->mr_);
    if (rc != 0 && rc != -FI_ENOKEY && req.uses_dmabuf()) {
      // Not every provider build takes dma-bufs: the device address then.
      KVF_LOG_WARN("{}: the provider refused GPU memory as a dma-buf ({}); registering device addresses from now "
                   "on (GPUDirect still, through the driver's peer-memory path)",
                   label_, fi_strerror(-rc));
      dmabuf_ = false;
      BuildMrRequest(m, access, requested, false, &req);
      rc = RegAttr(call, domain_, req, &mr->mr_);
    }
    if (rc != -FI_ENOKEY || prov_key_) break;
  }
  if (rc)
    return Status::FabricError(text::Format("registering {} bytes of {} memory on {} failed: {}; {}", m.length,
                                            Describe(req), label_, fi_strerror(-rc),
                                            device ? "check that the GPU driver's peer-memory or dma-buf support is "
                                                     "loaded (kvfabric doctor)"
                                                   : "check the locked-memory limit (ulimit -l)"));
  mr->desc_ = fi_mr_desc(mr->mr_);
  mr->key_ = fi_mr_key(mr->mr_);
  if (mr->key_ == FI_KEY_NOTAVAIL)
    return Status::Unavailable(label_ + ": provider uses raw MR keys (FI_MR_RAW), not supported");
  *out = std::move(mr);
  return Status::OK();
}

bool Rail::TakeRemoteActivity() {
  if (remote_cntr_ == nullptr) return false;
  const uint64_t now = fi_cntr_read(remote_cntr_);
  if (now == remote_seen_) return false;
  remote_seen_ = now;
  return true;
}

bool Rail::TryWait() {
  fid* fids[1] = {&cq_->fid};
  return fi_trywait(fabric_, fids, 1) == FI_SUCCESS;
}

}  // namespace kvfabric::fabric
