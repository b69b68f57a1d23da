// SegmentDirectory: the segments this engine opened, by handle and by name,
// with each peer's descriptor. It fetches descriptors (from the peer's
// handshake server, or the metadata store), installs them (which local
// rails serve the peer, AV inserts) and refreshes them when a peer may have
// restarted or registered more memory.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/counters.h"
#include "engine/peer.h"
#include "engine/rail_set.h"
#include "metadata/handshake.h"
#include "metadata/segment_desc.h"
#include "metadata/store.h"

namespace kvfabric::engine {

// The handle of the engine's own segment: transfers to it are local copies.
inline constexpr SegmentHandle kSelfHandle = 0;

class SegmentDirectory {
 public:
  // `self` is the engine's own segment name (handle kSelfHandle). `rails`
  // and `store` (null with p2p) must outlive the directory.
  // `counters` (null: nothing counted) count peers' requests and failed
  // fetches.
  SegmentDirectory(std::string self, const RailSet* rails, metadata::MetadataStore* store,
                   metadata::CallOptions call, Counters* counters = nullptr);
  // Segments open now.
  size_t size();

  // The handle of `name`, fetching and installing its descriptor the first
  // time; the same name always gets the same handle until closed.
  Status Open(const std::string& name, SegmentHandle* out);
  // Forgets a segment; its AV slots leave once no operation uses them.
  Status Close(SegmentHandle handle);
  // The open peer, or null (also for kSelfHandle).
  std::shared_ptr<Peer> Find(SegmentHandle handle);
  // Fetches `peer`'s descriptor again and installs it.
  Status Refresh(Peer* peer);

  const metadata::CallOptions& call_options() const { return call_; }

 private:
  Status Fetch(const std::string& name, std::shared_ptr<const metadata::SegmentDesc>* out);
  // Installs a descriptor and inserts the peer's address on every usable
  // rail now (a local fi_av_insert each; tcp connects on first use), so
  // moving work between rails never inserts under a rail's lock.
  Status Install(Peer* peer, std::shared_ptr<const metadata::SegmentDesc> desc);
  // Which local rails serve `peer`: the shm rail for a same-host peer that
  // has one, else the protocol's rails that pair with it.
  void ChooseRails(Peer* peer);

  const std::string self_;
  const RailSet* rails_;
  metadata::MetadataStore* store_;
  const metadata::CallOptions call_;
  Counters* const counters_;
  std::mutex mu_;
  std::unordered_map<std::string, SegmentHandle> by_name_;
  std::unordered_map<SegmentHandle, std::shared_ptr<Peer>> peers_;
  SegmentHandle next_ = kSelfHandle + 1;
};

}  // namespace kvfabric::engine
