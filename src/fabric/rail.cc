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
// progress thread then waits for; measured over tcp, posting only from the
// progress thread took writes from 87% to 103% of the bare fabric.
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

// The owner of name probes (Rail::ProbeUnreadNames): nobody waits for them.
class NameProbeOwner final : public SliceOwner {
 public:
  void OnSliceDone(const Slice&, size_t, const Status&) override {}
  bool OnSliceStalled(const Slice&) override { return false; }
  bool CanMove(const Slice&) override { return false; }
  bool Abandoned() override { return false; }
};

SliceOwner* NameProbe() {
  static NameProbeOwner* const owner = new NameProbeOwner;  // outlives every rail
  return owner;
}

// Where name probes READ their byte: static, so a probe a peer serves after
// its rail closed still writes into this process's own memory.
uint8_t probe_sink[64];

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
  write_flags_ = options.write_completion == WriteCompletion::kDelivery ? FI_COMPLETION | FI_DELIVERY_COMPLETE
                                                                        : FI_COMPLETION;
}

Status Rail::Open(const fi_info* info, const RailOptions& options, size_t index,
                  std::unique_ptr<Rail>* out) {
  std::unique_ptr<Rail> r(new Rail(info, options, index));
  const std::string& where = r->label_;
  const uint64_t mr_mode = info->domain_attr->mr_mode;
  if (mr_mode & FI_MR_ENDPOINT)
    return Status::Unavailable(where + ": provider requires FI_MR_ENDPOINT, which kvfabric does not offer");

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
  r->info_copy_ = fi_dupinfo(info);
  if (r->info_copy_ == nullptr) return Status::FabricError(where + ": fi_dupinfo failed (out of memory)");
  int rc = fi_fabric(info->fabric_attr, &r->fabric_, nullptr);
  if (rc) return Status::FabricError(where + ": " + FiError("fi_fabric", rc));
  rc = fi_domain(r->fabric_, const_cast<fi_info*>(info), &r->domain_, nullptr);
  if (rc) return Status::FabricError(where + ": " + FiError("fi_domain", rc));

  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  rc = fi_av_open(r->domain_, &av_attr, &r->av_, nullptr);
  if (rc) return Status::FabricError(where + ": " + FiError("fi_av_open", rc));

  // A waitable CQ lets an idle progress thread sleep in epoll instead of
  // spinning (on 2 cores a blocking waiter beat busy polling); shm has none.
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;
  cq_attr.size = options.cq_size > 0 ? options.cq_size : depth;
  cq_attr.wait_obj = FI_WAIT_FD;
  rc = fi_cq_open(r->domain_, &cq_attr, &r->cq_, nullptr);
  if (rc != 0) {
    cq_attr.wait_obj = FI_WAIT_NONE;
    rc = fi_cq_open(r->domain_, &cq_attr, &r->cq_, nullptr);
  }
  if (rc) return Status::FabricError(where + ": " + FiError("fi_cq_open", rc));
  if (cq_attr.wait_obj == FI_WAIT_FD && fi_control(&r->cq_->fid, FI_GETWAIT, &r->wait_fd_) != 0)
    r->wait_fd_ = -1;
  // Never allow more operations in flight than the CQ can hold.
  if (cq_attr.size > 0 && cq_attr.size < depth) depth = cq_attr.size;
  r->info_.tx_depth = depth;

  const std::string shm_name = r->NameShmEndpoint();
  rc = fi_endpoint(r->domain_, r->info_copy_, &r->ep_, nullptr);
  if (rc) return Status::FabricError(where + ": " + FiError("fi_endpoint", rc));
  rc = fi_ep_bind(r->ep_, &r->av_->fid, 0);
  if (rc) return Status::FabricError(where + ": " + FiError("fi_ep_bind(av)", rc));
  rc = fi_ep_bind(r->ep_, &r->cq_->fid, FI_TRANSMIT | FI_RECV);
  if (rc) return Status::FabricError(where + ": " + FiError("fi_ep_bind(cq)", rc));
  if (info->caps & FI_RMA_EVENT) {
    // Counts peers' READs and WRITEs of this endpoint's memory; without it
    // a passive target's progress thread cannot tell it is serving.
    fi_cntr_attr cntr_attr{};
    cntr_attr.events = FI_CNTR_EVENTS_COMP;
    cntr_attr.wait_obj = FI_WAIT_NONE;
    rc = fi_cntr_open(r->domain_, &cntr_attr, &r->remote_cntr_, nullptr);
    if (rc == 0) rc = fi_ep_bind(r->ep_, &r->remote_cntr_->fid, FI_REMOTE_READ | FI_REMOTE_WRITE);
    if (rc != 0) {
      KVF_LOG_DEBUG("{}: no remote-access counter ({}); an idle target polls on its own schedule", where,
                    fi_strerror(-rc));
      CloseFid(r->remote_cntr_ ? &r->remote_cntr_->fid : nullptr);
      r->remote_cntr_ = nullptr;
    }
  }
  const bool efa = r->info_.provider == "efa";
  const OptionCalls calls{
      [ep = r->ep_](int name, const void* v, size_t len) { return fi_setopt(&ep->fid, FI_OPT_ENDPOINT, name, v, len); },
      [ep = r->ep_](int name, void* v, size_t* len) { return fi_getopt(&ep->fid, FI_OPT_ENDPOINT, name, v, len); }};
  if (efa) SetEfaOptionsBeforeEnable(calls, options.efa_rnr_retry, &r->efa_report_);
  rc = fi_enable(r->ep_);
  if (rc) return Status::FabricError(where + ": " + FiError("fi_enable", rc));
  r->HoldShmRegion(shm_name, &r->main_hold_);
  if (efa) {
    ReadEfaEmulation(calls, &r->efa_report_);
    for (const std::string& w : r->efa_report_.warnings) KVF_LOG_WARN("{}: {}", where, w);
  }

  char name[256];
  size_t len = sizeof(name);
  rc = fi_getname(&r->ep_->fid, name, &len);
  if (rc) return Status::FabricError(where + ": " + FiError("fi_getname", rc));
  r->address_.assign(name, len);

  r->contexts_.reset(new OpContext[depth]);
  r->free_.reserve(depth);
  for (size_t i = 0; i < depth; ++i) r->free_.push_back(&r->contexts_[depth - 1 - i]);

  KVF_LOG_INFO("opened {}: fabric {}, tx depth {}, largest message {}, mr_mode {:#x}{}{}", where,
               r->info_.fabric, depth, text::Bytes(max_msg), mr_mode,
               r->wait_fd_ >= 0 ? ", waitable CQ" : ", polled CQ",
               efa ? ", RMA " + DescribeRma(r->efa_report_) : "");
  *out = std::move(r);
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

Status Rail::InsertPeer(const std::string& raw_address, int64_t pid, fi_addr_t* out) {
  std::lock_guard<std::mutex> g(post_mu_);
  fi_addr_t a = FI_ADDR_NOTAVAIL;
  if (peers_.FindLive(raw_address, &a)) {  // one insert per address in use (see PeerTable::AddRef)
    peers_.AddRef(a);
    *out = a;
    return Status::OK();
  }
  int rc = fi_av_insert(av_, raw_address.data(), 1, &a, 0, nullptr);
  if (rc != 1 || a == FI_ADDR_NOTAVAIL || a >= (1u << 24))
    return Status::FabricError(
        text::Format("fi_av_insert on {} failed: {}", label_, rc < 0 ? fi_strerror(-rc) : "address rejected"));
  RemotePeer* p = peers_.Slot(a);
  p->address = raw_address;
  if (per_peer_ep_ && p->ep == nullptr) {
    std::lock_guard<std::mutex> cq_guard(cq_mu_);
    p->pid = pid;
    fid_ep* ep = nullptr;
    const std::string shm_name = NameShmEndpoint();
    rc = fi_endpoint(domain_, info_copy_, &ep, nullptr);
    if (rc == 0) rc = fi_ep_bind(ep, &av_->fid, 0);
    if (rc == 0) rc = fi_ep_bind(ep, &cq_->fid, FI_TRANSMIT | FI_RECV);
    if (rc == 0) rc = fi_enable(ep);
    if (rc == 0) HoldShmRegion(shm_name, &peer_holds_[ep]);
    if (rc != 0) {
      if (ep != nullptr) fi_close(&ep->fid);
      if (p->refs == 0) fi_av_remove(av_, &a, 1, 0);  // undo this insert; nothing uses the slot
      return Status::FabricError(
          text::Format("{}: opening a transmit endpoint for a peer failed: {}", label_, fi_strerror(-rc)));
    }
    p->ep = ep;
  }
  peers_.AddRef(a);
  *out = a;
  return Status::OK();
}

bool Rail::CutPeer(fi_addr_t slot, std::string_view why) {
  if (!cuts_connections_) return false;
  std::lock_guard<std::mutex> post(post_mu_);
  RemotePeer* p = peers_.At(slot);
  if (p == nullptr || p->refs == 0) return false;
  const int64_t in_flight = p->inflight.load();
  if (in_flight == 0 || p->cut_since_post) return false;
  std::lock_guard<std::mutex> cq(cq_mu_);
  // A second insert of the address keeps the slot (the AV counts inserts);
  // the removal then runs rxm's cleanup, which closes the connection.
  fi_addr_t again = FI_ADDR_NOTAVAIL;
  int rc = fi_av_insert(av_, p->address.data(), 1, &again, 0, nullptr);
  if (rc != 1 || again != slot) {
    if (rc == 1 && again != FI_ADDR_NOTAVAIL) fi_av_remove(av_, &again, 1, 0);
    KVF_LOG_WARN("{}: cannot close the connection to {} ({}): inserting its address again gave slot {}, not {}; its "
                 "operations in flight may still land later",
                 label_, PeerText(*p), why, rc == 1 ? static_cast<int64_t>(again) : -1, slot);
    return false;
  }
  rc = fi_av_remove(av_, &slot, 1, 0);
  if (rc != 0) {
    KVF_LOG_WARN("{}: closing the connection to {} ({}) failed: {}; its operations in flight may still land later",
                 label_, PeerText(*p), why, fi_strerror(-rc));
    return false;
  }
  p->cut_since_post = true;
  KVF_LOG_WARN("{}: closed the connection to {} with {} operation(s) in flight: {}; its next request connects again",
               label_, PeerText(*p), in_flight, why);
  return true;
}

Rail::Whereabouts Rail::WhereaboutsOf(const SliceOwner* owner, fi_addr_t slot) {
  Whereabouts w;
  std::lock_guard<std::mutex> post(post_mu_);
  {
    std::lock_guard<std::mutex> g(queue_mu_);
    for (const Slice& s : pending_) {
      w.queued += s.owner == owner && s.dest == slot ? 1 : 0;
      w.queued_refused += PeerTable::RefusedSince(peers_.At(s.dest)) != 0 ? 1 : 0;
    }
    w.rail_queued = pending_.size();
    w.queued_count = queued_.load();
    w.free_contexts = free_.size();
  }
  const int64_t now = SteadyNowNs();
  const auto since = [now](const std::atomic<int64_t>& at) {
    const int64_t t = at.load(std::memory_order_relaxed);
    return t == 0 ? int64_t{-1} : (now - t) / 1000000;
  };
  w.since_poll_ms = since(last_poll_ns_);
  w.since_drain_ms = since(last_drain_ns_);
  w.since_post_ms = since(last_post_ns_);
  for (size_t i = 0; i < info_.tx_depth; ++i) {
    const OpContext& op = contexts_[i];
    w.posted += op.posted && !op.detached && op.slice.owner == owner && op.slice.dest == slot ? 1 : 0;
  }
  const int64_t refused = PeerTable::RefusedSince(peers_.At(slot));
  if (refused != 0) w.refused_ms = std::max<int64_t>(1, (now - refused) / 1000000);
  return w;
}

void Rail::RemovePeer(fi_addr_t slot) {
  std::lock_guard<std::mutex> g(post_mu_);
  if (peers_.Remove(slot) && waker_) waker_();
}

size_t Rail::peer_slots() {
  std::lock_guard<std::mutex> g(post_mu_);
  return peers_.slots_in_use();
}

void Rail::ReapRemovedPeers() {
  std::lock_guard<std::mutex> g(post_mu_);
  std::vector<bool> queued(peers_.size(), false);
  {
    std::lock_guard<std::mutex> q(queue_mu_);
    for (const Slice& s : pending_)
      if (s.dest < queued.size()) queued[s.dest] = true;
  }
  // A quiet slot whose endpoint may have sent its name unread waits for a
  // probe first (PeerTable::NameMayBeUnread).
  for (size_t a = 0; a < queued.size(); ++a) {
    RemotePeer* p = peers_.At(a);
    if (p->removals > 0 && p->inflight.load() == 0 && !queued[a] && PeerTable::NameMayBeUnread(*p)) {
      QueueNameProbeLocked(a, p);
      queued[a] = true;
    }
  }
  for (const PeerTable::Removal& r : peers_.TakeQuietRemovals(queued)) {
    if (r.close_ep != nullptr) {
      std::lock_guard<std::mutex> c(cq_mu_);
      ClosePeerEndpointLocked(r.close_ep);
    }
    fi_addr_t slot = r.slot;
    int rc = fi_av_remove(av_, &slot, 1, 0);
    if (rc != 0)
      KVF_LOG_WARN("{}: fi_av_remove of slot {} failed: {}; the entry stays in the address vector", label_, r.slot,
                   fi_strerror(-rc));
  }
}

void Rail::ProbeUnreadNames() {
  if (!per_peer_ep_) return;
  std::lock_guard<std::mutex> g(post_mu_);
  for (size_t a = 0; a < peers_.size(); ++a) {
    RemotePeer* p = peers_.At(a);
    if (PeerTable::NameMayBeUnread(*p)) QueueNameProbeLocked(a, p);
  }
}

void Rail::QueueNameProbeLocked(fi_addr_t slot, RemotePeer* p) {
  p->name_probe = true;
  // The probe gets the whole connect time of its own: a peer whose
  // requests just failed for refusals (a slow or stopped one) is the one
  // most likely to read the name late.
  PeerTable::Taken(p);
  probes_queued_.fetch_add(1);
  Slice s;
  s.owner = NameProbe();
  s.rail = static_cast<uint32_t>(index_);
  s.write = false;
  s.local = probe_sink;
  s.length = 1;
  s.dest = slot;
  s.remote_addr = p->probe_addr;  // any answer will do: a READ the peer refuses still shows it read the name
  s.remote_key = p->probe_key;
  Enqueue(&s, 1, /*post_now=*/false);
}

bool Rail::PeerAlive(RemotePeer* p) {
  if (p == nullptr || p->pid == 0) return true;  // no clock read on the common path
  return peers_.Alive(p, SteadyNowNs());
}

void Rail::ReapDeadPeers() {
  std::lock_guard<std::mutex> g(post_mu_);
  std::vector<fid_ep*> close;
  if (peers_.TakeDeadPeers(&close) == 0) return;
  // After the close the provider never touches these endpoints' operations again.
  {
    std::lock_guard<std::mutex> c(cq_mu_);
    for (fid_ep* ep : close) ClosePeerEndpointLocked(ep);
  }
  while (ReadCompletions() > 0) {
  }
  const size_t depth = info_.tx_depth;
  for (size_t i = 0; i < depth; ++i) {
    OpContext* op = &contexts_[i];
    if (op->peer != nullptr && op->peer->dead && op->peer->cleaned)
      Finish(op, Status::NetworkError(
                     text::Format("peer process {} on this host exited with this operation in flight", op->peer->pid)));
  }
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

void Rail::Enqueue(Slice* slices, size_t n, bool post_now) {
  uint64_t bytes = 0;
  {
    std::lock_guard<std::mutex> g(queue_mu_);
    // The stall clock starts when an idle rail gets work (not at each
    // post: a post that the provider refuses with -FI_EAGAIN, as tcp does
    // forever on a link that is down, must not restart it).
    if (queued_.load() == 0 && inflight_.load() == 0) health_.WorkStarted(SteadyNowNs());
    for (size_t i = 0; i < n; ++i) {
      bytes += slices[i].length;
      pending_.push_back(std::move(slices[i]));
    }
    queued_.fetch_add(static_cast<int64_t>(n));
    unfinished_.fetch_add(static_cast<int64_t>(n));
  }
  load_bytes_.fetch_add(bytes);
  if (post_now && !post_from_progress_) KickPosting(0);
  if (waker_) waker_();
}

bool Rail::KickPosting(int64_t burst_ns) {
  // Whoever holds post_mu_ re-checks the queue after releasing it, so a slice
  // queued while another thread drains is never stranded.
  while (queued_.load() > 0) {
    {
      std::lock_guard<std::mutex> g(queue_mu_);
      if (free_.empty()) return false;  // the progress thread posts when credits return
    }
    if (!post_mu_.try_lock()) return false;
    const int64_t before = queued_.load();
    const bool burst_over = DrainLocked(burst_ns);
    post_mu_.unlock();
    if (burst_over) return queued_.load() > 0;  // completions are read before the next posts
    if (queued_.load() >= before) return false;  // no progress (EAGAIN): let the poller drive
  }
  return false;
}

int Rail::PostOne(OpContext* op) {
  Slice& s = op->slice;
  fid_ep* ep = op->peer != nullptr && op->peer->ep != nullptr ? op->peer->ep : ep_;
  if (s.write) {
    iovec iov{s.local, s.length};
    void* desc = s.local_desc;
    fi_rma_iov rma{s.remote_addr, s.length, s.remote_key};
    fi_msg_rma msg{};
    msg.msg_iov = &iov;
    msg.desc = &desc;
    msg.iov_count = 1;
    msg.addr = s.dest;
    msg.rma_iov = &rma;
    msg.rma_iov_count = 1;
    msg.context = &op->ctx;
    return static_cast<int>(fi_writemsg(ep, &msg, write_flags_));
  }
  return static_cast<int>(fi_read(ep, s.local, s.length, s.local_desc, s.dest, s.remote_addr,
                                  s.remote_key, &op->ctx));
}

bool Rail::DrainLocked(int64_t burst_ns) {
  // -FI_EAGAIN for one peer (connecting, or dead: tcp returns it forever) must
  // not block the others: such a slice goes to the back of the queue.
  // A burst bounds the time spent posting: where the provider copies inside
  // the post (shm), the completions of the posts made so far are read
  // before the next ones (measured: a batch of 32 READs of 128 KiB took
  // about 0.7 ms to post, and all 32 were reported at its end).
  int eagain_streak = 0;
  int64_t budget = queued_.load();
  const int64_t drain_ns = SteadyNowNs();  // also the time of its posts (WhereaboutsOf counts in ms)
  last_drain_ns_.store(drain_ns, std::memory_order_relaxed);
  while (budget-- > 0) {
    OpContext* op = nullptr;
    {
      std::lock_guard<std::mutex> g(queue_mu_);
      if (pending_.empty() || free_.empty()) return false;
      op = free_.back();
      free_.pop_back();
      op->slice = std::move(pending_.front());
      pending_.pop_front();
      queued_.fetch_sub(1);
      if (op->slice.owner == NameProbe()) probes_queued_.fetch_sub(1);
    }
    if (op->slice.owner->Abandoned()) {
      FailUnposted(op, Status::Timeout("dropped before posting"));
      continue;
    }
    RemotePeer* peer = peers_.At(op->slice.dest);
    if (!PeerAlive(peer)) {
      FailUnposted(op, Status::NetworkError(text::Format("peer process {} on this host has exited", peer->pid)));
      continue;
    }
    op->peer = peer;
    if (peer != nullptr) peer->inflight.fetch_add(1);
    inflight_.fetch_add(1);
    op->posted = true;
    int rc = PostOne(op);
    if (rc == 0) {
      eagain_streak = 0;
      last_post_ns_.store(drain_ns, std::memory_order_relaxed);
      PeerTable::PostTaken(peer);
      if (peer != nullptr) peer->cut_since_post = false;
      if (burst_ns > 0 && SteadyNowNs() - drain_ns >= burst_ns) return true;
      continue;
    }
    op->posted = false;
    inflight_.fetch_sub(1);
    if (peer != nullptr) peer->inflight.fetch_sub(1);
    op->peer = nullptr;
    if (rc == -FI_EAGAIN) PeerTable::PostRefused(peer, op->slice.remote_addr, op->slice.remote_key);
    if (rc == -FI_EAGAIN && PeerTable::RefusedTooLong(peer, SteadyNowNs(), refused_ns_)) {
      FailUnposted(op, Status::NetworkError(text::Format(
                           "{}: the provider refused every post to peer {} for {} ms: it cannot connect (the peer "
                           "died, or its address cannot be reached; KVF_HANDSHAKE_TIMEOUT_MS)",
                           label_, PeerText(*peer), refused_ns_ / 1000000)));
      continue;
    }
    if (rc == -FI_EAGAIN) {
      {
        std::lock_guard<std::mutex> g(queue_mu_);
        if (op->slice.owner == NameProbe()) probes_queued_.fetch_add(1);
        pending_.push_back(std::move(op->slice));
        op->slice = Slice();
        free_.push_back(op);
        queued_.fetch_add(1);
      }
      if (++eagain_streak >= 4) return false;
      continue;
    }
    Status err = Status::FabricError(
        text::Format("{} on {} failed: {}", op->slice.write ? "fi_writemsg" : "fi_read", label_, fi_strerror(-rc)));
    KVF_LOG_WARN("{}", err.message());
    FailUnposted(op, err);
  }
  return false;
}

void Rail::FailUnposted(OpContext* op, const Status& error) {
  Slice s = std::move(op->slice);
  ReleaseContext(op);
  load_bytes_.fetch_sub(s.length);
  unfinished_.fetch_sub(1);
  s.owner->OnSliceDone(s, 0, error);
}

void Rail::ReleaseContext(OpContext* op) {
  op->slice.keepalive.reset();
  op->slice.owner = nullptr;
  std::lock_guard<std::mutex> g(queue_mu_);
  free_.push_back(op);
}

void Rail::Finish(OpContext* op, const Status& error) {
  if (op->peer != nullptr) op->peer->inflight.fetch_sub(1);
  op->peer = nullptr;
  op->posted = false;
  if (op->detached) {
    // Moved to another rail after a stall: its owner has forgotten it.
    op->detached = false;
    ReleaseContext(op);
    return;
  }
  Slice s = std::move(op->slice);
  ReleaseContext(op);
  load_bytes_.fetch_sub(s.length);
  unfinished_.fetch_sub(1);
  if (s.owner == NameProbe()) {
    // Not the user's traffic: no counters.
  } else if (error.ok()) {
    completed_bytes_.fetch_add(s.length, std::memory_order_relaxed);
    RailCounters::Add(s.write ? counters_.writes : counters_.reads);
    RailCounters::Add(s.write ? counters_.write_bytes : counters_.read_bytes, s.length);
  } else {
    RailCounters::Add(counters_.errors);
  }
  inflight_.fetch_sub(1);
  s.owner->OnSliceDone(s, error.ok() ? s.length : 0, error);
}

size_t Rail::ReadCompletions() {
  fi_cq_data_entry entries[64];
  std::unique_lock<std::mutex> g(cq_mu_);
  ssize_t n = fi_cq_read(cq_, entries, 64);
  if (n == -FI_EAGAIN) return 0;
  g.unlock();
  if (n > 0) {
    if (health_.Completed(SteadyNowNs())) {
      RailCounters::Add(counters_.recoveries);
      KVF_LOG_INFO("{}: operations complete again; back in service", label_);
    }
    for (ssize_t i = 0; i < n; ++i)
      Finish(reinterpret_cast<OpContext*>(entries[i].op_context), Status::OK());
    return static_cast<size_t>(n);
  }
  if (n == -FI_EAVAIL) {
    fi_cq_err_entry err{};
    g.lock();
    ssize_t got = fi_cq_readerr(cq_, &err, 0);
    g.unlock();
    if (got <= 0) return 0;
    char buf[256] = {0};
    const char* text = fi_cq_strerror(cq_, err.prov_errno, err.err_data, buf, sizeof(buf));
    const Status::Code code = CompletionErrorCode(info_.provider, err.err, err.prov_errno);
    const std::string msg =
        text::Format("operation on {} failed: {} ({}){}", label_, fi_strerror(err.err), text ? text : "",
                     code == Status::Code::kNetworkError ? "; the connection to the peer was lost" : "");
    if (err.op_context != nullptr) {
      Finish(reinterpret_cast<OpContext*>(err.op_context),
             code == Status::Code::kNetworkError ? Status::NetworkError(msg) : Status::FabricError(msg));
    } else {
      // shm reports a dead peer this way; the liveness check or the request
      // deadline ends the affected work.
      KVF_LOG_DEBUG("{} (no operation context)", msg);
    }
    return 1;
  }
  if (n < 0 && n != -FI_EAGAIN)
    KVF_LOG_ERROR("fi_cq_read on {} failed: {}", label_, fi_strerror(-n));
  return 0;
}

bool Rail::TakeRemoteActivity() {
  if (remote_cntr_ == nullptr) return false;
  const uint64_t now = fi_cntr_read(remote_cntr_);
  if (now == remote_seen_) return false;
  remote_seen_ = now;
  return true;
}

size_t Rail::Poll() {
  size_t done = ReadCompletions();
  if (per_peer_ep_ && done == 0 && inflight_.load(std::memory_order_relaxed) > 0) {
    // Nothing completes: every 100 ms, check the processes of busy peers.
    const int64_t now = SteadyNowNs();
    if (peers_.BusyCheckDue(now)) {
      std::lock_guard<std::mutex> g(post_mu_);
      peers_.CheckBusyPeers(now);
    }
  }
  if (peers_.TakeDeadFound()) ReapDeadPeers();
  if (peers_.removals_pending()) ReapRemovedPeers();
  const int64_t now = SteadyNowNs();
  last_poll_ns_.store(now, std::memory_order_relaxed);
  health_.Sample(now, load_bytes_.load(std::memory_order_relaxed), completed_bytes_.load(std::memory_order_relaxed));
  if (done == 0) CheckStall(now);
  burst_left_posts_ = queued_.load(std::memory_order_relaxed) > 0 && KickPosting(post_burst_ns_);
  return done;
}

std::string Rail::PeerText(const PeerTable::Peer& peer) const {
  char text[128] = {};
  size_t len = sizeof(text);
  fi_av_straddr(av_, peer.address.data(), text, &len);
  return text[0] != 0 ? std::string(text) : std::string("(address unknown)");
}

int64_t Rail::LatestRefusalOfWaitingPeers() {
  std::lock_guard<std::mutex> post(post_mu_);
  std::lock_guard<std::mutex> g(queue_mu_);
  int64_t latest = 0;
  for (const Slice& s : pending_) {
    const int64_t since = PeerTable::RefusedSince(peers_.At(s.dest));
    if (since == 0) return 0;
    latest = std::max(latest, since);
  }
  return latest;
}

void Rail::CheckStall(int64_t now) {
  // Work waiting counts as well as work in flight: slices the provider keeps
  // refusing (-FI_EAGAIN) sit queued with nothing in flight. But slices
  // that wait only for peers the provider cannot connect to (a peer that
  // died: tcp refuses its posts for ever), when the rail completed an
  // operation for another peer since, say nothing about the link
  // (StallIsThePeers): they fail on their own after
  // RailOptions::refused_period (DrainLocked), and the rail stays in
  // service for every other peer. A rail that completed nothing since (a
  // cut link, or its only peer gone) stalls as before.
  const bool in_flight = inflight_.load(std::memory_order_relaxed) > 0;
  // Name probes waiting for their peer say nothing of the link (they end
  // on their own after the connect time): only other slices count.
  const bool waiting = queued_.load(std::memory_order_relaxed) > probes_queued_.load(std::memory_order_relaxed);
  // The waiting peers are looked up (under the rail's locks) only when a stall is due.
  const int64_t latest_refusal = !in_flight && waiting && health_.StallDue(now) ? LatestRefusalOfWaitingPeers() : 0;
  if (StallIsThePeers(in_flight, waiting, latest_refusal, health_.last_completed_ns())) {
    health_.Excused(now);
    return;
  }
  if (!health_.CheckStall(now, in_flight || waiting)) return;
  RailCounters::Add(counters_.stalls);
  size_t moved = 0, kept = 0;
  const int64_t posted_now = inflight_.load();
  // Posted operations (CheckStall in rail.h). Where this rail can close
  // a connection safely, it does so for a peer whose posted slices would
  // all move, so that they fail now and move as failed slices, and none
  // lands later; the others wait (for the link, or their deadline's cut).
  // Elsewhere each is offered to its owner and, if moved, detached: the
  // provider keeps it, and it may still complete when the link comes back.
  // Posted operations stay posted until this thread reads the CQ, so the
  // snapshot taken under the post lock stays valid after it; owners are
  // asked without it (they look at other rails), and CutPeer takes it again.
  std::vector<std::pair<fi_addr_t, std::vector<OpContext*>>> peers;  // slot, its posted operations
  {
    std::lock_guard<std::mutex> g(post_mu_);
    for (size_t i = 0; i < info_.tx_depth; ++i) {
      OpContext& op = contexts_[i];
      if (!op.posted || op.detached || op.slice.owner == NameProbe()) continue;
      auto it = std::find_if(peers.begin(), peers.end(), [&](const auto& p) { return p.first == op.slice.dest; });
      if (it == peers.end()) peers.emplace_back(op.slice.dest, std::vector<OpContext*>{&op});
      else it->second.push_back(&op);
    }
  }
  size_t cut = 0;
  for (const auto& [slot, ops] : peers) {
    if (cuts_stalled_connections_) {
      const bool all_move =
          std::all_of(ops.begin(), ops.end(), [](const OpContext* op) { return op->slice.owner->CanMove(op->slice); });
      constexpr const char* kWhy = "its rail stalled (KVF_RAIL_STALL_MS); those operations fail and move to other rails";
      if (all_move && CutPeer(slot, kWhy))
        ++cut;
      else
        kept += ops.size();
      continue;
    }
    for (OpContext* op : ops) {
      if (!op->slice.owner->OnSliceStalled(op->slice)) {
        ++kept;
        continue;
      }
      // The provider still owns the context (and the registration it uses);
      // it comes back through the CQ, or never if the link stays down.
      op->detached = true;
      op->slice.owner = nullptr;
      inflight_.fetch_sub(1);
      unfinished_.fetch_sub(1);
      load_bytes_.fetch_sub(op->slice.length);
      ++moved;
    }
  }
  std::deque<Slice> queued;
  {
    std::lock_guard<std::mutex> g(queue_mu_);
    queued.swap(pending_);
    queued_.fetch_sub(static_cast<int64_t>(queued.size()));
  }
  std::deque<Slice> keep;
  for (Slice& s : queued) {
    if (s.owner->OnSliceStalled(s)) {
      load_bytes_.fetch_sub(s.length);
      unfinished_.fetch_sub(1);
      ++moved;
    } else {
      keep.push_back(std::move(s));
    }
  }
  if (!keep.empty()) {
    std::lock_guard<std::mutex> g(queue_mu_);
    kept += keep.size();
    queued_.fetch_add(static_cast<int64_t>(keep.size()));
    pending_.insert(pending_.begin(), std::make_move_iterator(keep.begin()), std::make_move_iterator(keep.end()));
  }
  KVF_LOG_WARN("{}: nothing completed for {} ms with {} operation(s) in flight; out of service for "
               "{} ms (KVF_RAIL_STALL_MS, KVF_RAIL_RETRY_MS): {} slice(s) moved to other rails, the connections of {} "
               "peer(s) closed so that their operations in flight fail and move too, {} left in place (no other rail "
               "would take them all); check the link of {}",
               label_, health_.stall_ns() / 1000000, posted_now, health_.retry_ns() / 1000000, moved, cut, kept,
               info_.domain);
}

bool Rail::TryWait() {
  fid* fids[1] = {&cq_->fid};
  return fi_trywait(fabric_, fids, 1) == FI_SUCCESS;
}

}  // namespace kvfabric::fabric
