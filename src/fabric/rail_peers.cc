// Rail: its peers, as address-vector slots: inserting and removing them,
// closing a connection (CutPeer), same-host peers whose process died, and
// the name probes that keep a shm peer's endpoint from closing before the
// peer has read its name.
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <mutex>

#include "common/clock.h"
#include "common/log.h"
#include "common/text.h"
#include "fabric/rail.h"

namespace kvfabric::fabric {
namespace {

// The owner of name probes (Rail::ProbeUnreadNames): nobody waits for them.
class NameProbeOwner final : public SliceOwner {
 public:
  void OnSliceDone(const Slice&, size_t, const Status&) override {}
  bool OnSliceStalled(const Slice&) override { return false; }
  bool CanMove(const Slice&) override { return false; }
  bool Abandoned() override { return false; }
};

// Where name probes READ their byte: static, so a probe a peer serves after
// its rail closed still writes into this process's own memory.
uint8_t probe_sink[64];

}  // namespace

SliceOwner* Rail::NameProbe() {
  static NameProbeOwner* const owner = new NameProbeOwner;  // outlives every rail
  return owner;
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

std::string Rail::PeerText(const PeerTable::Peer& peer) const {
  char text[128] = {};
  size_t len = sizeof(text);
  fi_av_straddr(av_, peer.address.data(), text, &len);
  return text[0] != 0 ? std::string(text) : std::string("(address unknown)");
}

}  // namespace kvfabric::fabric
