#include "engine/peer.h"

#include <thread>

#include "common/host.h"
#include "common/log.h"
#include "common/text.h"

namespace kvfabric::engine {

std::vector<int> PairRails(const std::vector<fabric::RailInfo>& local, const metadata::SegmentDesc& remote) {
  std::vector<int> out(local.size(), -1);
  for (size_t i = 0; i < local.size(); ++i) {
    std::vector<int> same_fabric, same_provider;
    for (size_t j = 0; j < remote.rails.size(); ++j) {
      if (remote.rails[j].provider != local[i].provider) continue;
      same_provider.push_back(static_cast<int>(j));
      if (remote.rails[j].fabric == local[i].fabric) same_fabric.push_back(static_cast<int>(j));
    }
    const auto& cand = same_fabric.empty() ? same_provider : same_fabric;
    if (cand.empty()) continue;
    // Position of rail i among local rails of its provider.
    size_t k = 0;
    for (size_t x = 0; x < i; ++x) k += local[x].provider == local[i].provider;
    out[i] = cand[k % cand.size()];
  }
  return out;
}

std::shared_ptr<const metadata::SegmentDesc> Peer::desc() const {
  std::lock_guard<std::mutex> g(mu_);
  return desc_;
}

Peer::Slots Peer::TakeSlotsLocked() {
  Slots out;
  for (size_t i = 0; i < av_.size(); ++i)
    if (av_[i] != FI_ADDR_NOTAVAIL) out.emplace_back(i, av_[i]);
  av_.assign(av_.size(), FI_ADDR_NOTAVAIL);
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
    if (!same_process_instance) {
      stale = TakeSlotsLocked();
      av_.assign(local.size(), FI_ADDR_NOTAVAIL);
    }
    pairs_ = PairRails(local, *desc);
    desc_ = std::move(desc);
  }
  if (!stale.empty()) WaitForPosts();
  return stale;
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

void Peer::set_usable_rails(std::vector<size_t> rails) {
  std::lock_guard<std::mutex> g(mu_);
  usable_ = std::make_shared<const std::vector<size_t>>(std::move(rails));
}

int Peer::PeerRail(size_t rail) const {
  std::lock_guard<std::mutex> g(mu_);
  return rail < pairs_.size() ? pairs_[rail] : -1;
}

bool Peer::Lookup(size_t rail, fi_addr_t* out) const {
  std::lock_guard<std::mutex> g(mu_);
  if (rail >= av_.size() || av_[rail] == FI_ADDR_NOTAVAIL) return false;
  *out = av_[rail];
  return true;
}

bool Peer::MarkRailDown(size_t rail, int64_t now_ns, int64_t until_ns) {
  return down_until_[rail].exchange(until_ns) <= now_ns;
}

Status Peer::Resolve(fabric::Rail* rail, fi_addr_t* out) {
  std::lock_guard<std::mutex> g(mu_);
  const size_t i = rail->index();
  if (closed_) return Status::NotFound("segment " + name_ + " was closed");
  if (i >= pairs_.size() || pairs_[i] < 0)
    return Status::Unavailable(text::Format("segment {} has no rail reachable from {}", name_,
                                            text::RailLabel(i, rail->info().provider, rail->info().domain)));
  if (av_[i] == FI_ADDR_NOTAVAIL) {
    const int64_t pid = desc_->host_id == host::BootId() ? desc_->pid : 0;
    KVF_RETURN_IF_ERROR(rail->InsertPeer(desc_->rails[pairs_[i]].address, pid, &av_[i]));
  }
  *out = av_[i];
  return Status::OK();
}

}  // namespace kvfabric::engine
