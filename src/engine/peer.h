// Peer: an opened remote segment. Holds the peer's descriptor and, for each
// local rail, the peer rails it can reach (the first preferred) with their
// AV slots (inserted lazily on first use, or the preferred ones all at once
// by Warmup). A request goes on rail pairs where both ends registered its
// memory: a buffer registered on its near rails only holds keys there.
#pragma once

#include <rdma/fabric.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/counters.h"
#include "engine/rail_choice.h"
#include "fabric/rail.h"
#include "fabric/rail_info.h"
#include "kvfabric/engine.h"
#include "metadata/segment_desc.h"

namespace kvfabric::engine {

// For each local rail, the index of the peer rail it pairs with, or -1:
// same provider; among those, the same fabric name (an IP subnet for tcp)
// when one matches; then spread by position so rail k meets peer rail k.
std::vector<int> PairRails(const std::vector<fabric::RailInfo>& local, const metadata::SegmentDesc& remote);

// For each local rail, every peer rail it can reach, the PairRails one
// first, then the others of the same provider and fabric (any fabric of
// the provider when none matches) in rotation after it, so local rails
// that fall back spread over the peer's rails.
std::vector<std::vector<int>> ReachableRails(const std::vector<fabric::RailInfo>& local,
                                             const metadata::SegmentDesc& remote);

// The first rail of `reachable` (peer rail indices, in preference order)
// on which `keys` (one per peer rail, a chunk's) holds a key, or -1.
int FirstKeyedRail(std::span<const int> reachable, const std::vector<std::optional<uint64_t>>& keys);

class Peer {
 public:
  // `counters` (null when the engine counts nothing) count its requests.
  Peer(SegmentHandle handle, std::string name, PeerCounters* counters = nullptr)
      : handle_(handle), name_(std::move(name)), counters_(counters) {}

  SegmentHandle handle() const { return handle_; }
  const std::string& name() const { return name_; }
  PeerCounters* counters() const { return counters_; }

  std::shared_ptr<const metadata::SegmentDesc> desc() const;
  // (local rail, AV slot) pairs the engine should remove from its rails.
  using Slots = std::vector<std::pair<size_t, fi_addr_t>>;
  // Installs a (re)fetched descriptor. Rail pairs are recomputed; AV slots of
  // an unchanged peer (same epoch) are kept, those of a restarted one are
  // returned for removal.
  Slots SetDesc(std::shared_ptr<const metadata::SegmentDesc> desc, const std::vector<fabric::RailInfo>& local);
  // Every (local rail, AV slot) pair resolved so far, left in place.
  Slots ResolvedSlots() const;
  // The segment is closed: every slot, for removal; later lookups and
  // resolves fail (a request that raced the close inserts nothing).
  Slots ReleaseSlots();

  // Held by a Post from its first Resolve until its slices are queued on
  // their rails. SetDesc and ReleaseSlots return slots for removal only
  // once the posts under way have queued theirs: a rail removes a slot only
  // when nothing is queued or in flight to it, and a slice queued after the
  // removal would be posted to a removed address (on shm: into the peer's
  // unmapped region).
  class PostGuard {
   public:
    explicit PostGuard(Peer* peer) : peer_(peer) { peer_->posting_.fetch_add(1); }
    ~PostGuard() { peer_->posting_.fetch_sub(1); }
    PostGuard(const PostGuard&) = delete;
    PostGuard& operator=(const PostGuard&) = delete;

   private:
    Peer* peer_;
  };

  // Local rails usable for this peer, in preference order (filled by the
  // engine). Shared and immutable: the submit path takes no copy.
  std::shared_ptr<const std::vector<size_t>> usable_rails() const;
  // Rails for memory no usable rail reaches: a same-host peer's GPU memory,
  // which the shm rail does not carry, goes over the NICs. Often empty.
  std::shared_ptr<const std::vector<size_t>> fallback_rails() const;
  void set_usable_rails(std::vector<size_t> rails, std::vector<size_t> fallback = {});

  // The peer rail local rail `rail` prefers, or -1 when it reaches none.
  int PeerRail(size_t rail) const;
  // The peer rail `rail` should use for memory whose keys (one per peer
  // rail) are `keys`: the preferred one when it holds a key, else the next
  // reachable one that does; -1 when none does.
  int PeerRailFor(size_t rail, const std::vector<std::optional<uint64_t>>& keys) const;
  // PeerRailFor of each of `rails`, into out[i], under one lock.
  void PeerRailsFor(std::span<const size_t> rails, const std::vector<std::optional<uint64_t>>& keys, int* out) const;
  // The AV slot of peer rail `peer_rail` on local `rail`, inserting the
  // peer's address on first use; the first form uses the preferred rail.
  Status Resolve(fabric::Rail* rail, fi_addr_t* out);
  Status Resolve(fabric::Rail* rail, int peer_rail, fi_addr_t* out);
  // The AV slot of that pair if it was resolved already (never inserts).
  bool Lookup(size_t rail, int peer_rail, fi_addr_t* out) const;

  // An operation to this peer failed on local rail `rail`: new work avoids
  // that rail for this peer until `until_ns` (steady clock). Returns true
  // when the rail was in service for the peer until now.
  bool MarkRailDown(size_t rail, int64_t now_ns, int64_t until_ns);
  bool RailUp(size_t rail, int64_t now_ns) const {
    return down_until_[rail].load(std::memory_order_relaxed) <= now_ns;
  }

  // A request to this peer failed or timed out: it may have died or
  // restarted under the same name. The next request refetches its descriptor
  // first (TakeSuspect clears the mark); a new epoch gets fresh AV slots.
  void MarkSuspect() { suspect_.store(true, std::memory_order_relaxed); }
  bool TakeSuspect() { return suspect_.exchange(false, std::memory_order_relaxed); }

 private:
  Slots ResolvedSlotsLocked() const;
  Slots TakeSlotsLocked();
  // Returns once no PostGuard taken before the call remains.
  void WaitForPosts() const;

  const SegmentHandle handle_;
  const std::string name_;
  PeerCounters* const counters_;
  mutable std::mutex mu_;
  std::shared_ptr<const metadata::SegmentDesc> desc_;
  std::vector<std::vector<int>> reach_;       // by local rail: ReachableRails
  std::vector<std::vector<fi_addr_t>> av_;    // by local rail, then peer rail
  std::shared_ptr<const std::vector<size_t>> usable_ = std::make_shared<const std::vector<size_t>>();
  std::shared_ptr<const std::vector<size_t>> fallback_ = std::make_shared<const std::vector<size_t>>();
  std::atomic<bool> suspect_{false};
  std::atomic<int> posting_{0};  // PostGuards alive
  bool closed_ = false;  // guarded by mu_
  std::array<std::atomic<int64_t>, kMaxLocalRails> down_until_{};
};

}  // namespace kvfabric::engine
