#include "engine/peer.h"

#include <algorithm>
#include <thread>

#include "common/host.h"
#include "common/log.h"
#include "common/text.h"

namespace kvfabric::engine {

namespace {

// The peer rails local rail `i` can reach: those of its provider, and of
// those the ones on its fabric when any is.
std::vector<int> SameFabricRails(const std::vector<fabric::RailInfo>& local, size_t i,
                                 const metadata::SegmentDesc& remote) {
  std::vector<int> same_fabric, same_provider;
  for (size_t j = 0; j < remote.rails.size(); ++j) {
    if (remote.rails[j].provider != local[i].provider) continue;
    same_provider.push_back(static_cast<int>(j));
    if (remote.rails[j].fabric == local[i].fabric) same_fabric.push_back(static_cast<int>(j));
  }
  return same_fabric.empty() ? same_provider : same_fabric;
}

}  // namespace

std::vector<int> PairRails(const std::vector<fabric::RailInfo>& local, const metadata::SegmentDesc& remote) {
  std::vector<int> out(local.size(), -1);
  for (size_t i = 0; i < local.size(); ++i) {
    const std::vector<int> cand = SameFabricRails(local, i, remote);
    if (cand.empty()) continue;
    // Position of rail i among local rails of its provider.
    size_t k = 0;
    for (size_t x = 0; x < i; ++x) k += local[x].provider == local[i].provider;
    out[i] = cand[k % cand.size()];
  }
  return out;
}

std::vector<std::vector<int>> ReachableRails(const std::vector<fabric::RailInfo>& local,
                                             const metadata::SegmentDesc& remote) {
  const std::vector<int> first = PairRails(local, remote);
  std::vector<std::vector<int>> out(local.size());
  for (size_t i = 0; i < local.size(); ++i) {
    if (first[i] < 0) continue;
    const std::vector<int> cand = SameFabricRails(local, i, remote);
    const size_t at = static_cast<size_t>(std::find(cand.begin(), cand.end(), first[i]) - cand.begin());
    for (size_t k = 0; k < cand.size(); ++k) out[i].push_back(cand[(at + k) % cand.size()]);
  }
  return out;
}

int FirstKeyedRail(std::span<const int> reachable, const std::vector<std::optional<uint64_t>>& keys) {
  for (int p : reachable)
    if (p >= 0 && static_cast<size_t>(p) < keys.size() && keys[p]) return p;
  return -1;
}

std::shared_ptr<const metadata::SegmentDesc> Peer::desc() const {
  std::lock_guard<std::mutex> g(mu_);
  return desc_;
}

Peer::Slots Peer::ResolvedSlotsLocked() const {
  Slots out;
  for (size_t i = 0; i < av_.size(); ++i)
    for (fi_addr_t a : av_[i])
      if (a != FI_ADDR_NOTAVAIL) out.emplace_back(i, a);
  return out;
}

Peer::Slots Peer::TakeSlotsLocked() {
  Slots out = ResolvedSlotsLocked();
  for (std::vector<fi_addr_t>& rail : av_) std::fill(rail.begin(), rail.end(), FI_ADDR_NOTAVAIL);
  return out;
}

void Peer::WaitForPosts() const {
  // A post queues its slices within microseconds: no sleep needed.
  while (posting_.load() > 0) std::this_thread::yield();
}

Peer::Slots Peer::SetDesc(std::shared_ptr<const metadata::SegmentDesc> desc,
                          const std::vector<fabric::RailInfo>& local) {
  Slots stale;
  {
    std::lock_guard<std::mutex> g(mu_);
    const bool same_process_instance = desc_ && desc_->epoch == desc->epoch;
    if (desc_ && !same_process_instance)
      KVF_LOG_INFO("segment {} restarted (epoch {} -> {}): reconnecting", name_, desc_->epoch, desc->epoch);
    if (!same_process_instance) stale = TakeSlotsLocked();
    // Slots of the same process stay where they are: its rails keep their
    // indices (a descriptor of the same epoch only adds or drops buffers).
    av_.resize(local.size());
    for (auto& row : av_) row.resize(desc->rails.size(), FI_ADDR_NOTAVAIL);
    reach_ = ReachableRails(local, *desc);
    desc_ = std::move(desc);
  }
  if (!stale.empty()) WaitForPosts();
  return stale;
}

Peer::Slots Peer::ResolvedSlots() const {
  std::lock_guard<std::mutex> g(mu_);
  return ResolvedSlotsLocked();
}

Peer::Slots Peer::ReleaseSlots() {
  Slots out;
  {
    std::lock_guard<std::mutex> g(mu_);
    closed_ = true;
    out = TakeSlotsLocked();
  }
  WaitForPosts();
  return out;
}

std::shared_ptr<const std::vector<size_t>> Peer::usable_rails() const {
  std::lock_guard<std::mutex> g(mu_);
  return usable_;
}

std::shared_ptr<const std::vector<size_t>> Peer::fallback_rails() const {
  std::lock_guard<std::mutex> g(mu_);
  return fallback_;
}

void Peer::set_usable_rails(std::vector<size_t> rails, std::vector<size_t> fallback) {
  std::lock_guard<std::mutex> g(mu_);
  usable_ = std::make_shared<const std::vector<size_t>>(std::move(rails));
  fallback_ = std::make_shared<const std::vector<size_t>>(std::move(fallback));
}

int Peer::PeerRail(size_t rail) const {
  std::lock_guard<std::mutex> g(mu_);
  return rail < reach_.size() && !reach_[rail].empty() ? reach_[rail].front() : -1;
}

int Peer::PeerRailFor(size_t rail, const std::vector<std::optional<uint64_t>>& keys) const {
  std::lock_guard<std::mutex> g(mu_);
  return rail < reach_.size() ? FirstKeyedRail(reach_[rail], keys) : -1;
}

void Peer::PeerRailsFor(std::span<const size_t> rails, const std::vector<std::optional<uint64_t>>& keys,
                        int* out) const {
  std::lock_guard<std::mutex> g(mu_);
  for (size_t i = 0; i < rails.size(); ++i)
    out[i] = rails[i] < reach_.size() ? FirstKeyedRail(reach_[rails[i]], keys) : -1;
}

bool Peer::Lookup(size_t rail, int peer_rail, fi_addr_t* out) const {
  std::lock_guard<std::mutex> g(mu_);
  if (rail >= av_.size() || peer_rail < 0 || static_cast<size_t>(peer_rail) >= av_[rail].size() ||
      av_[rail][peer_rail] == FI_ADDR_NOTAVAIL)
    return false;
  *out = av_[rail][peer_rail];
  return true;
}

bool Peer::MarkRailDown(size_t rail, int64_t now_ns, int64_t until_ns) {
  return down_until_[rail].exchange(until_ns) <= now_ns;
}

Status Peer::Resolve(fabric::Rail* rail, fi_addr_t* out) { return Resolve(rail, PeerRail(rail->index()), out); }

Status Peer::Resolve(fabric::Rail* rail, int peer_rail, fi_addr_t* out) {
  std::lock_guard<std::mutex> g(mu_);
  const size_t i = rail->index();
  if (closed_) return Status::NotFound("segment " + name_ + " was closed");
  if (i >= reach_.size() || std::find(reach_[i].begin(), reach_[i].end(), peer_rail) == reach_[i].end())
    return Status::Unavailable(text::Format("segment {} has no rail {} reachable from {}", name_, peer_rail,
                                            text::RailLabel(i, rail->info().provider, rail->info().domain)));
  fi_addr_t& a = av_[i][peer_rail];
  if (a == FI_ADDR_NOTAVAIL) {
    const int64_t pid = desc_->host_id == host::BootId() ? desc_->pid : 0;
    KVF_RETURN_IF_ERROR(rail->InsertPeer(desc_->rails[peer_rail].address, pid, &a));
  }
  *out = a;
  return Status::OK();
}

}  // namespace kvfabric::engine
