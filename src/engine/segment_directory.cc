#include "engine/segment_directory.h"

#include "common/host.h"
#include "common/text.h"
#include "metadata/descriptor_seal.h"
#include "net/address.h"

namespace kvfabric::engine {

SegmentDirectory::SegmentDirectory(std::string self, const RailSet* rails, metadata::MetadataStore* store,
                                   metadata::CallOptions call, Counters* counters)
    : self_(std::move(self)), rails_(rails), store_(store), call_(std::move(call)), counters_(counters) {
  by_name_[self_] = kSelfHandle;
}

size_t SegmentDirectory::size() {
  std::lock_guard<std::mutex> g(mu_);
  return peers_.size();
}

Status SegmentDirectory::Fetch(const std::string& name, std::shared_ptr<const metadata::SegmentDesc>* out) {
  std::string text;
  if (store_ != nullptr) {
    const Status s = store_->Fetch(name, &text);
    if (!s.ok() && counters_ != nullptr) counters_->MetadataFailed();
    KVF_RETURN_IF_ERROR(s);
  } else {
    const Status s = metadata::HandshakeCall(name, metadata::kGetSegment, "", call_, &text);
    if (!s.ok() && counters_ != nullptr) counters_->HandshakeFailed();
    KVF_RETURN_IF_ERROR(s);
  }
  auto d = std::make_shared<metadata::SegmentDesc>();
  if (Status s = metadata::OpenDescriptor(text, call_.auth_token, d.get()); !s.ok()) {
    if (counters_ != nullptr) counters_->MetadataFailed();
    return s.Annotate("segment " + name);
  }
  // A descriptor speaks for the segment asked for only. Over p2p the name
  // may be spelled another way (a host name for an address) if it reaches
  // the same endpoint.
  if (d->name != name && (store_ != nullptr || !net::SameEndpoint(d->name, name))) {
    if (counters_ != nullptr) counters_->MetadataFailed();
    return Status::PermissionDenied(text::Format(
        "segment {}: the descriptor received names segment {}; refused (a tampered metadata entry, or a name that "
        "is not the engine's own: open segments by the name the peer reports)",
        name, d->name));
  }
  *out = std::move(d);
  return Status::OK();
}

void SegmentDirectory::ChooseRails(Peer* peer) {
  auto d = peer->desc();
  std::vector<size_t> primary;
  for (size_t r : rails_->primary)
    if (peer->PeerRail(r) >= 0) primary.push_back(r);
  // A same-host peer goes over shm; its memory shm does not carry (GPU
  // memory: the shm rail is kept to host memory) over the NICs.
  if (rails_->shm >= 0 && d->host_id == host::BootId() && peer->PeerRail(rails_->shm) >= 0)
    peer->set_usable_rails({static_cast<size_t>(rails_->shm)}, std::move(primary));
  else
    peer->set_usable_rails(std::move(primary));
}

Status SegmentDirectory::Install(Peer* peer, std::shared_ptr<const metadata::SegmentDesc> desc) {
  if (auto held = peer->desc(); held && metadata::IsStale(*held, *desc)) {
    if (counters_ != nullptr) counters_->MetadataFailed();
    return Status::PermissionDenied(text::Format(
        "segment {}: refused a stale descriptor (epoch {} generation {}, older than epoch {} generation {} in use): "
        "a replayed metadata entry, or the peer's clock went back; close and reopen the segment to accept it",
        peer->name(), desc->epoch, desc->generation, held->epoch, held->generation));
  }
  // A restarted peer's old slots leave the AV once its operations are done.
  for (const auto& [rail, slot] : peer->SetDesc(std::move(desc), rails_->infos)) (*rails_)[rail]->RemovePeer(slot);
  ChooseRails(peer);
  const auto usable = peer->usable_rails();
  if (usable->empty())
    return Status::Unavailable("segment " + peer->name() + " shares no provider with this engine (" +
                               rails_->infos.front().provider + "); start both sides with the same --protocol");
  for (size_t r : *usable) {
    fi_addr_t a;
    KVF_RETURN_IF_ERROR(peer->Resolve((*rails_)[r], &a).Annotate("segment " + peer->name()));
  }
  return Status::OK();
}

Status SegmentDirectory::Refresh(Peer* peer) {
  std::shared_ptr<const metadata::SegmentDesc> d;
  KVF_RETURN_IF_ERROR(Fetch(peer->name(), &d));
  return Install(peer, std::move(d));
}

Status SegmentDirectory::Open(const std::string& name, SegmentHandle* out) {
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = by_name_.find(name);
    if (it != by_name_.end()) {
      *out = it->second;
      return Status::OK();
    }
  }
  std::shared_ptr<const metadata::SegmentDesc> d;
  KVF_RETURN_IF_ERROR(Fetch(name, &d).Annotate("open segment " + name));
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_name_.find(name);
  if (it != by_name_.end()) {  // opened concurrently
    *out = it->second;
    return Status::OK();
  }
  auto peer = std::make_shared<Peer>(next_, name, counters_ != nullptr ? counters_->ForPeer(name) : nullptr);
  KVF_RETURN_IF_ERROR(Install(peer.get(), std::move(d)));
  peers_[peer->handle()] = peer;
  by_name_[name] = peer->handle();
  *out = next_++;
  return Status::OK();
}

Status SegmentDirectory::Close(SegmentHandle handle) {
  if (handle == kSelfHandle) return Status::InvalidArgument("the engine's own segment cannot be closed");
  std::lock_guard<std::mutex> g(mu_);
  auto it = peers_.find(handle);
  if (it == peers_.end()) return Status::NotFound(text::Format("unknown segment handle {}", handle));
  for (const auto& [rail, slot] : it->second->ReleaseSlots()) (*rails_)[rail]->RemovePeer(slot);
  by_name_.erase(it->second->name());
  peers_.erase(it);
  return Status::OK();
}

std::shared_ptr<Peer> SegmentDirectory::Find(SegmentHandle handle) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = peers_.find(handle);
  return it == peers_.end() ? nullptr : it->second;
}

}  // namespace kvfabric::engine
