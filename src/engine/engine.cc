#include "kvfabric/engine.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <random>
#include <unordered_map>

#include "common/hex.h"
#include "common/host.h"
#include "common/log.h"
#include "engine/batch.h"
#include "engine/peer.h"
#include "fabric/fabric_info.h"
#include "fabric/progress.h"
#include "fabric/rail.h"
#include "memory/cuda.h"
#include "memory/memory_registry.h"
#include "memory/staging.h"
#include "metadata/handshake.h"
#include "metadata/segment_desc.h"
#include "metadata/store.h"
#include "topology/topology.h"

namespace kvfabric {

using engine::Batch;
using engine::Clock;
using engine::Peer;

namespace {

constexpr SegmentHandle kSelfHandle = 0;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// What a task needs to cut its bytes into slices again on another rail.
struct Route {
  std::shared_ptr<const memory::Buffer> local;
  std::shared_ptr<const metadata::SegmentDesc> desc;
  const metadata::BufferDesc* remote = nullptr;  // inside *desc
};

// The chunk of a peer's buffer holding remote address `ra` (inside it).
std::vector<metadata::ChunkDesc>::const_iterator RemoteChunkAt(const std::vector<metadata::ChunkDesc>& chunks,
                                                               uint64_t ra) {
  return std::upper_bound(chunks.begin(), chunks.end(), ra,
                          [](uint64_t a, const metadata::ChunkDesc& c) { return a < c.addr; }) - 1;
}

// Striped pieces: about this many per rail, so rails of unequal speed each
// take a share that ends at the same time.
constexpr size_t kPiecesPerRail = 4;
constexpr size_t kMinPiece = 64 << 10;
// Bounded so one piece moves well within KVF_RAIL_STALL_MS on a slow rail.
constexpr size_t kMaxPiece = 8 << 20;

bool IsP2p(const std::string& m) {
  std::string l = m;
  std::transform(l.begin(), l.end(), l.begin(), ::tolower);
  return l == "p2p" || l == "p2phandshake";
}

}  // namespace

struct Engine::Impl final : engine::Rerouter {
  Settings settings;
  std::string name;
  uint64_t epoch = 0;
  std::vector<std::unique_ptr<fabric::Rail>> rails;
  std::vector<RailInfo> rail_infos;
  std::vector<size_t> primary_rails;  // the protocol's rails
  int shm_rail = -1;                  // same-host rail under protocol auto
  topology::Topology topo;
  std::unique_ptr<memory::MemoryRegistry> registry;
  std::mutex staging_mu;
  std::unique_ptr<memory::StagingPool> staging;  // created on the first staged transfer
  std::unique_ptr<fabric::Progress> progress;
  std::unique_ptr<metadata::HandshakeServer> server;
  std::unique_ptr<metadata::MetadataStore> store;  // null with p2p

  std::mutex peers_mu;
  std::unordered_map<std::string, SegmentHandle> peer_names;
  std::unordered_map<SegmentHandle, std::shared_ptr<Peer>> peers;
  SegmentHandle next_handle = 1;

  std::mutex batches_mu;
  std::unordered_map<BatchId, std::shared_ptr<Batch>> batches;
  std::vector<std::shared_ptr<Batch>> zombies;  // freed, slices still out
  BatchId next_batch = 1;

  static constexpr size_t kMaxNotifies = 4096;  // refused beyond, never dropped
  std::mutex notify_mu;
  std::deque<std::string> notifies;

  ~Impl() {
    if (store) {
      Status s = store->Remove(name);  // peers stop finding us now, not at lease expiry
      if (!s.ok()) KVF_LOG_WARN("shutdown: {}", s.ToString());
      store.reset();
    }
    server.reset();    // no new peers
    progress.reset();  // no more completions
    {
      std::lock_guard<std::mutex> g(batches_mu);
      batches.clear();
      zombies.clear();
    }
    registry.reset();  // MRs close while their domains are open
    staging.reset();
    rails.clear();
  }

  metadata::CallOptions call_options() const {
    return {settings.handshake_timeout_ms, static_cast<size_t>(settings.handshake_max_frame), settings.auth_token};
  }

  Status OpenProvider(const std::string& provider, const std::string& nic_filter,
                      const std::string& bind_ip, std::vector<size_t>* opened) {
    fabric::InfoList infos;
    KVF_RETURN_IF_ERROR(fabric::InfoList::Query(provider, &infos));
    std::vector<fi_info*> chosen;
    KVF_RETURN_IF_ERROR(fabric::SelectDomains(infos, nic_filter, bind_ip, &chosen));
    if (rails.size() + chosen.size() > Peer::kMaxRails)
      return Status::InvalidArgument(std::to_string(rails.size() + chosen.size()) + " rails; at most " +
                                     std::to_string(Peer::kMaxRails) + " are supported: narrow them with the NIC filter");
    for (fi_info* info : chosen) {
      std::unique_ptr<fabric::Rail> rail;
      KVF_RETURN_IF_ERROR(fabric::Rail::Open(info, settings, rails.size(), &rail));
      opened->push_back(rails.size());
      rail_infos.push_back(rail->info());
      rails.push_back(std::move(rail));
    }
    return Status::OK();
  }

  metadata::SegmentDesc BuildDesc() const {
    metadata::SegmentDesc d;
    d.name = name;
    d.epoch = epoch;
    d.host_id = host::BootId();
    d.pid = getpid();
    for (const auto& r : rails)
      d.rails.push_back({r->info().provider, r->info().fabric, r->info().domain, r->address(),
                         r->virt_addr()});
    for (const auto& b : registry->Snapshot()) {
      metadata::BufferDesc bd{b->addr, b->length, b->location, {}};
      for (const auto& c : b->chunks) {
        metadata::ChunkDesc cd{c.addr, c.length, {}};
        for (const auto& mr : c.regions)
          cd.keys.push_back(mr ? std::optional<uint64_t>(mr->key()) : std::nullopt);
        bd.chunks.push_back(std::move(cd));
      }
      d.buffers.push_back(std::move(bd));
    }
    return d;
  }

  Status HandleRequest(uint16_t type, const std::string& payload, std::string* reply) {
    switch (type) {
      case metadata::kGetSegment:
        *reply = metadata::ToJson(BuildDesc());
        return Status::OK();
      case metadata::kProbe:
        *reply = name;
        return Status::OK();
      case metadata::kNotify: {
        std::lock_guard<std::mutex> g(notify_mu);
        if (notifies.size() >= kMaxNotifies)
          return Status::Busy("notification queue of " + name + " is full (" + std::to_string(kMaxNotifies) +
                              " messages): the receiver must call GetNotifies");
        notifies.push_back(payload);
        return Status::OK();
      }
    }
    return Status::ProtocolError("unknown request");
  }

  // With a metadata store, the descriptor as published there (registrations
  // republish it); with p2p nothing to do: peers ask the handshake server.
  Status Publish() {
    if (!store) return Status::OK();
    return store->Publish(name, metadata::ToJson(BuildDesc()));
  }

  Status FetchDesc(const std::string& peer_name, std::shared_ptr<const metadata::SegmentDesc>* out) {
    std::string text;
    if (store)
      KVF_RETURN_IF_ERROR(store->Fetch(peer_name, &text));
    else
      KVF_RETURN_IF_ERROR(metadata::HandshakeCall(peer_name, metadata::kGetSegment, "", call_options(), &text));
    auto d = std::make_shared<metadata::SegmentDesc>();
    KVF_RETURN_IF_ERROR(metadata::FromJson(text, d.get()).Annotate("segment " + peer_name));
    *out = std::move(d);
    return Status::OK();
  }

  // Which local rails serve a peer: the shm rail for a same-host peer that
  // has one (host memory), else the protocol's rails that pair with it.
  void ChooseRails(Peer* peer) {
    auto d = peer->desc();
    std::vector<size_t> use;
    if (shm_rail >= 0 && d->host_id == host::BootId() && peer->PeerRail(shm_rail) >= 0)
      use.push_back(static_cast<size_t>(shm_rail));
    if (use.empty())
      for (size_t r : primary_rails)
        if (peer->PeerRail(r) >= 0) use.push_back(r);
    peer->set_usable_rails(std::move(use));
  }

  // Installs a peer's descriptor and inserts its address on every usable
  // rail now (a local fi_av_insert each; tcp connects on first use), so
  // moving work between rails never inserts under a rail's lock.
  Status InstallDesc(Peer* peer, std::shared_ptr<const metadata::SegmentDesc> d) {
    // A restarted peer's old slots leave the AV once its operations are done.
    for (const auto& [rail, slot] : peer->SetDesc(std::move(d), rail_infos)) rails[rail]->RemovePeer(slot);
    ChooseRails(peer);
    const auto usable = peer->usable_rails();
    if (usable->empty())
      return Status::Unavailable("segment " + peer->name() + " shares no provider with this engine (" +
                                 rail_infos.front().provider + "); start both sides with the same --protocol");
    for (size_t r : *usable) {
      fi_addr_t a;
      KVF_RETURN_IF_ERROR(peer->Resolve(rails[r].get(), &a).Annotate("segment " + peer->name()));
    }
    return Status::OK();
  }

  std::shared_ptr<Peer> FindPeer(SegmentHandle h) {
    std::lock_guard<std::mutex> g(peers_mu);
    auto it = peers.find(h);
    return it == peers.end() ? nullptr : it->second;
  }

  std::shared_ptr<Batch> FindBatch(BatchId id) {
    std::lock_guard<std::mutex> g(batches_mu);
    auto it = batches.find(id);
    return it == batches.end() ? nullptr : it->second;
  }

  void ReapZombiesLocked() {
    zombies.erase(std::remove_if(zombies.begin(), zombies.end(),
                                 [](const std::shared_ptr<Batch>& b) { return b->outstanding_slices().load() == 0; }),
                  zombies.end());
  }

  // A validated request, ready to become slices.
  struct Plan {
    const TransferRequest* req;
    std::shared_ptr<Peer> peer;  // null for the engine's own segment
    std::shared_ptr<const memory::Buffer> local;
    std::shared_ptr<const metadata::SegmentDesc> desc;
    const metadata::BufferDesc* remote = nullptr;
    std::shared_ptr<const memory::Buffer> self_remote;  // own segment: the target buffer
  };

  Status Validate(const TransferRequest& r, size_t index, Plan* plan) {
    const std::string where = "request " + std::to_string(index);
    plan->req = &r;
    if (r.length == 0 || r.local == nullptr)
      return Status::InvalidArgument(where + ": null local address or zero length");
    const auto local = reinterpret_cast<uintptr_t>(r.local);
    plan->local = registry->Find(local, r.length);
    if (!plan->local)
      return Status::OutOfRange(where + ": local range [" + hex::Address(local) + ", +" + std::to_string(r.length) +
                                ") is not inside a registered buffer; register it first");
    if (r.target == kSelfHandle) {
      plan->self_remote = registry->Find(r.remote_addr, r.length);
      if (!plan->self_remote)
        return Status::OutOfRange(where + ": target range [" + hex::Address(r.remote_addr) + ", +" +
                                  std::to_string(r.length) + ") is outside this engine's registered buffers");
      return Status::OK();
    }
    plan->peer = FindPeer(r.target);
    if (!plan->peer)
      return Status::NotFound(where + ": unknown segment handle " + std::to_string(r.target) +
                              " (open the segment first)");
    if (plan->peer->TakeSuspect()) {
      // Its last request failed: it may have restarted under the same name.
      std::shared_ptr<const metadata::SegmentDesc> fresh;
      Status s = FetchDesc(plan->peer->name(), &fresh);
      if (!s.ok()) {
        plan->peer->MarkSuspect();
        return s.Annotate(where + ": segment " + plan->peer->name() + " failed its last request and does not answer");
      }
      KVF_RETURN_IF_ERROR(InstallDesc(plan->peer.get(), fresh));
    }
    plan->desc = plan->peer->desc();
    plan->remote = plan->desc->FindBuffer(r.remote_addr, r.length);
    if (plan->remote == nullptr) {
      // The peer may have registered memory since we fetched its descriptor.
      std::shared_ptr<const metadata::SegmentDesc> fresh;
      KVF_RETURN_IF_ERROR(FetchDesc(plan->peer->name(), &fresh).Annotate(where));
      KVF_RETURN_IF_ERROR(InstallDesc(plan->peer.get(), fresh));
      plan->desc = plan->peer->desc();
      plan->remote = plan->desc->FindBuffer(r.remote_addr, r.length);
    }
    if (plan->remote == nullptr)
      return Status::OutOfRange(where + ": remote range [" + hex::Address(r.remote_addr) + ", +" +
                                std::to_string(r.length) + ") is outside the buffers segment " +
                                plan->peer->name() + " registered");
    return Status::OK();
  }

  // The rails of `peer` that may take new work: in service (not stalled)
  // and not failed for this peer, never `exclude`. With `fallback`, when
  // none qualifies, every usable rail but `exclude` (better to try a rail
  // that failed a while ago than to fail the request). Returns the count.
  // Rails near the local memory (`near`, a Buffer::near_rails mask) first:
  // the others only when none of those may take work.
  size_t Candidates(const Peer& peer, const std::vector<size_t>& usable, int64_t now, int exclude, bool fallback,
                    uint64_t near, size_t* out) const {
    auto take = [&](auto ok) {
      size_t n = 0;
      for (size_t r : usable)
        if (static_cast<int>(r) != exclude && ok(r)) out[n++] = r;
      return n;
    };
    auto serving = [&](size_t r) { return rails[r]->InService(now) && peer.RailUp(r, now); };
    size_t n = take([&](size_t r) { return (near >> r & 1) && serving(r); });
    if (n == 0) n = take(serving);
    if (n == 0 && fallback) n = take([](size_t) { return true; });
    return n;
  }

  // The candidate rail that should finish `len` more bytes first: the bytes
  // waiting on it (queued or in flight, plus those `planned` for it by this
  // request) and `len`, over its speed. Speeds count only when every
  // candidate was measured in the last half second and they differ by 30%
  // or more (rails of 2,2,2,1 Gbit/s): on even rails the measurements'
  // noise alone cost 3-20% when they were always used, so there the bytes
  // decide. A slow rail drains slower and takes less either way; dividing
  // by speed also keeps its share of one batch from finishing last.
  size_t PickRail(const size_t* cand, size_t n, size_t len, const uint64_t* planned, int64_t now) const {
    constexpr int64_t kFreshNs = 500000000;
    double speed[Peer::kMaxRails];
    double lo = 0, hi = 0;
    for (size_t i = 0; i < n; ++i) {
      speed[i] = rails[cand[i]]->Throughput(now, kFreshNs);
      lo = i == 0 ? speed[i] : std::min(lo, speed[i]);
      hi = std::max(hi, speed[i]);
    }
    const bool by_speed = lo > 0 && hi >= 1.3 * lo;
    size_t best = cand[0];
    double best_cost = 0;
    for (size_t i = 0; i < n; ++i) {
      double cost = static_cast<double>(rails[cand[i]]->load_bytes() + planned[cand[i]] + len);
      if (by_speed) cost /= speed[i];
      if (i == 0 || cost < best_cost) {
        best = cand[i];
        best_cost = cost;
      }
    }
    return best;
  }

  // Points `s` at remote address `ra`, inside chunk `rc` of the route's
  // remote buffer, through peer rail `peer_rail` (which has a key there).
  static void AimAt(const Route& route, int peer_rail, uint64_t ra,
                    std::vector<metadata::ChunkDesc>::const_iterator rc, fabric::Slice* s) {
    s->remote_va = ra;
    s->remote_addr = route.desc->rails[peer_rail].virt_addr ? ra : ra - rc->addr;
    s->remote_key = *rc->keys[peer_rail];
  }

  // Arms `task` for `slices` slices of request `p` (its deadline, and its
  // name in errors) and counts them against the batch.
  void StartTask(Batch* batch, engine::Task* task, const Plan& p, std::shared_ptr<Route> route, size_t slices) {
    const TransferRequest& r = *p.req;
    const bool write = r.opcode == OpCode::kWrite;
    const std::string memory = p.local->device >= 0 ? "of " + p.local->location + " memory " : "";
    task->Start(batch, static_cast<uint32_t>(slices),
                Clock::now() + std::chrono::milliseconds(settings.transfer_timeout_ms), settings.transfer_timeout_ms,
                std::string(write ? "WRITE" : "READ") + " of " + std::to_string(r.length) + " bytes " + memory +
                    (write ? "to " : "from ") + p.peer->name(),
                p.peer, this, std::move(route));
    batch->outstanding_slices().fetch_add(static_cast<int64_t>(slices));
  }

  // Cuts [l, l+len) <-> [ra, ra+len) into slices for one rail: at the rail's
  // max_msg_size and at MR chunk boundaries on both sides.
  Status MakeSlices(const Route& route, bool write, Peer* peer, fabric::Rail* rail, uintptr_t l, uint64_t ra,
                    size_t len, uint32_t attempts, engine::Task* task, std::vector<fabric::Slice>* out) {
    fi_addr_t dest;
    KVF_RETURN_IF_ERROR(peer->Resolve(rail, &dest));
    const int peer_rail = peer->PeerRail(rail->index());
    if (peer_rail < 0 || static_cast<size_t>(peer_rail) >= route.desc->rails.size())
      return Status::Unavailable("segment " + peer->name() + " has no rail paired with local rail " +
                                 std::to_string(rail->index()));
    const size_t max_msg = rail->info().max_msg_size;
    const auto& rchunks = route.remote->chunks;
    while (len > 0) {
      const memory::Chunk& lc = route.local->ChunkAt(l);
      auto rc = RemoteChunkAt(rchunks, ra);
      const auto& key = rc->keys[peer_rail];
      const auto& mr = lc.regions[rail->index()];
      if (!key && route.remote->location.rfind("cuda", 0) == 0)
        return Status::Unavailable("segment " + peer->name() + "'s buffer is GPU memory (" + route.remote->location +
                                   ") its rail " + std::to_string(peer_rail) +
                                   " cannot expose (no FI_HMEM there); only same-process copies reach it");
      if (!key || !mr)
        return Status::Unavailable("memory not registered on rail " + std::to_string(rail->index()));
      size_t n = std::min({len, max_msg, lc.addr + lc.length - l, rc->addr + rc->length - ra});
      fabric::Slice s;
      s.owner = task;
      s.rail = static_cast<uint32_t>(rail->index());
      s.attempts = attempts;
      s.write = write;
      s.local = reinterpret_cast<void*>(l);
      s.length = n;
      s.local_desc = mr->desc();
      s.dest = dest;
      AimAt(route, peer_rail, ra, rc, &s);
      s.keepalive = route.local;
      out->push_back(std::move(s));
      l += n;
      ra += n;
      len -= n;
    }
    return Status::OK();
  }

  Status EnsureStaging() {
    std::lock_guard<std::mutex> g(staging_mu);
    if (staging) return Status::OK();
    std::vector<fabric::Rail*> raw;
    for (auto& r : rails) raw.push_back(r.get());
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(settings.staging_bytes, 0));
    return memory::StagingPool::Create(raw, bytes, std::min<size_t>(1 << 20, bytes / 4), &staging);
  }

  // A request whose local memory is on a GPU that the rails cannot register
  // (no FI_HMEM): each slice goes through a pinned staging slot. A WRITE's
  // slice is copied device -> slot here, on the submitting thread, while the
  // slices before it are on the wire; a READ's is copied slot -> device by
  // Unstage as it completes. Slices pick rails as any other; they are not
  // moved to another rail on failure. Submit blocks while every slot is in use.
  Status PostStaged(Batch* batch, engine::Task* task, const Plan& p, std::shared_ptr<Route> route,
                    const size_t* cand, size_t ncand) {
    const TransferRequest& r = *p.req;
    const bool write = r.opcode == OpCode::kWrite;
    KVF_RETURN_IF_ERROR(EnsureStaging().Annotate("GPU memory on " + rails[cand[0]]->info().provider));
    const auto& rchunks = p.remote->chunks;
    size_t max_msg = staging->slot_bytes();
    for (size_t i = 0; i < ncand; ++i) {
      max_msg = std::min(max_msg, rails[cand[i]]->info().max_msg_size);
      const int pr = p.peer->PeerRail(cand[i]);
      for (const auto& c : rchunks)
        if (pr < 0 || !c.keys[pr])
          return Status::Unavailable("segment " + p.peer->name() + "'s buffer is not reachable on its rail " +
                                     std::to_string(pr) + (p.remote->location.rfind("cuda", 0) == 0
                                                               ? " (GPU memory there, without FI_HMEM)" : ""));
    }
    // The slices: at most one slot each, cut at the peer's chunk edges.
    std::vector<std::pair<uint64_t, size_t>> parts;
    for (uint64_t off = 0; off < r.length;) {
      const uint64_t ra = r.remote_addr + off;
      auto rc = RemoteChunkAt(rchunks, ra);
      const size_t n = std::min<uint64_t>({max_msg, r.length - off, rc->addr + rc->length - ra});
      parts.emplace_back(off, n);
      off += n;
    }
    StartTask(batch, task, p, route, parts.size());
    uint64_t planned[Peer::kMaxRails] = {};
    const int64_t now = NowNs();
    for (const auto& [off, n] : parts) {
      const size_t ri = ncand == 1 ? cand[0] : PickRail(cand, ncand, n, planned, now);
      planned[ri] += n;
      const uint64_t ra = r.remote_addr + off;
      fabric::Slice s;
      s.owner = task;
      s.rail = static_cast<uint32_t>(ri);
      s.write = write;
      s.length = n;
      AimAt(*route, p.peer->PeerRail(ri), ra, RemoteChunkAt(rchunks, ra), &s);
      s.keepalive = route->local;
      s.device = p.local->device;
      s.device_addr = static_cast<uint8_t*>(r.local) + off;
      s.staging_slot = static_cast<int32_t>(staging->Acquire());
      s.local = staging->Address(static_cast<uint32_t>(s.staging_slot));
      s.local_desc = staging->Desc(ri);
      Status st = p.peer->Resolve(rails[ri].get(), &s.dest);
      if (st.ok() && write) st = memory::cuda::Copy(s.local, s.device_addr, n, s.device);
      if (!st.ok()) {
        task->OnSliceDone(s, 0, st);  // releases the slot, fails the task
        continue;
      }
      rails[ri]->Enqueue(&s, 1);
    }
    return Status::OK();
  }

  // engine::Rerouter
  Status Unstage(const fabric::Slice& s, bool copy_back) override {
    Status st;
    if (copy_back)
      st = memory::cuda::Copy(s.device_addr, staging->Address(static_cast<uint32_t>(s.staging_slot)), s.length,
                              s.device);
    staging->Release(static_cast<uint32_t>(s.staging_slot));
    return st;
  }

  // Splits one request into slices, striped across the peer's rails when it
  // is at least KVF_STRIPE_THRESHOLD long, and queues them.
  Status Post(Batch* batch, engine::Task* task, const Plan& p, std::vector<fabric::Slice>* scratch) {
    const TransferRequest& r = *p.req;
    const bool write = r.opcode == OpCode::kWrite;
    auto route = std::make_shared<Route>(Route{p.local, p.desc, p.remote});
    const auto usable = p.peer->usable_rails();
    size_t cand[Peer::kMaxRails];
    const int64_t now = NowNs();
    const size_t ncand = Candidates(*p.peer, *usable, now, -1, /*fallback=*/true, p.local->near_rails, cand);
    if (ncand == 0) return Status::Unavailable("segment " + p.peer->name() + " has no usable rail");
    // GPU memory the rails did not register (no FI_HMEM): through staging.
    if (p.local->device >= 0 && !p.local->chunks.front().regions[cand[0]])
      return PostStaged(batch, task, p, std::move(route), cand, ncand);
    size_t piece = r.length;
    const size_t threshold = static_cast<size_t>(std::max<int64_t>(settings.stripe_threshold, 0));
    if (threshold > 0 && r.length >= threshold && ncand > 1) {
      const size_t want = ncand * kPiecesPerRail;
      piece = std::clamp((r.length + want - 1) / want, kMinPiece, kMaxPiece);
      piece = (piece + 4095) & ~size_t{4095};
    }
    uint64_t planned[Peer::kMaxRails] = {};
    scratch->clear();
    const uintptr_t l = reinterpret_cast<uintptr_t>(r.local);
    for (size_t off = 0; off < r.length;) {
      const size_t n = std::min(piece, r.length - off);
      const size_t ri = ncand == 1 ? cand[0] : PickRail(cand, ncand, n, planned, now);
      planned[ri] += n;
      KVF_RETURN_IF_ERROR(MakeSlices(*route, write, p.peer.get(), rails[ri].get(), l + off, r.remote_addr + off, n,
                                     0, task, scratch));
      off += n;
    }
    StartTask(batch, task, p, std::move(route), scratch->size());
    if (piece < r.length)  // one queue operation per rail
      std::stable_sort(scratch->begin(), scratch->end(),
                       [](const fabric::Slice& a, const fabric::Slice& b) { return a.rail < b.rail; });
    for (size_t i = 0; i < scratch->size();) {
      size_t j = i;
      while (j < scratch->size() && (*scratch)[j].rail == (*scratch)[i].rail) ++j;
      rails[(*scratch)[i].rail]->Enqueue(scratch->data() + i, j - i);
      i = j;
    }
    return Status::OK();
  }

  // engine::Rerouter: a slice failed (or its rail stalled); queue its bytes
  // on another rail of the same peer. Called from progress or posting
  // threads, possibly with the failed rail's post lock held: it only queues
  // (the progress thread posts) and never inserts AV entries.
  uint32_t Reroute(engine::Task* task, const fabric::Slice& s, bool failed) override {
    const std::shared_ptr<Peer>& peer = task->peer();
    const auto route = std::static_pointer_cast<const Route>(task->route());
    if (!peer || !route || s.staging_slot >= 0) return 0;
    // Keys and slots of a restarted peer's new process do not fit this request.
    if (peer->desc()->epoch != route->desc->epoch) return 0;
    const int64_t now = NowNs();
    if (failed && peer->MarkRailDown(s.rail, now, now + settings.rail_retry_ms * 1000000))
      KVF_LOG_WARN("segment {}: an operation on rail {} ({}) failed; that rail is out of service for this peer for "
                   "{} ms (KVF_RAIL_RETRY_MS) and its work moves to the peer's other rails",
                   peer->name(), s.rail, rails[s.rail]->info().domain, settings.rail_retry_ms);
    const auto usable = peer->usable_rails();
    if (s.attempts + 1 >= usable->size()) return 0;  // every rail had its chance
    size_t cand[Peer::kMaxRails];
    const size_t ncand =
        Candidates(*peer, *usable, now, static_cast<int>(s.rail), /*fallback=*/false, route->local->near_rails, cand);
    if (ncand == 0) return 0;
    uint64_t planned[Peer::kMaxRails] = {};
    const size_t ri = PickRail(cand, ncand, s.length, planned, now);
    fi_addr_t unused;
    if (!peer->Lookup(ri, &unused)) return 0;  // reconnecting after a restart: let the task fail
    std::vector<fabric::Slice> out;
    Status st = MakeSlices(*route, s.write, peer.get(), rails[ri].get(), reinterpret_cast<uintptr_t>(s.local),
                           s.remote_va, s.length, s.attempts + 1, task, &out);
    if (!st.ok() || out.empty()) return 0;
    task->AddSlices(static_cast<uint32_t>(out.size()));
    rails[ri]->Enqueue(out.data(), out.size(), /*post_now=*/false);
    return static_cast<uint32_t>(out.size());
  }
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Status PrepareLibfabric(const Settings& settings) {
  // GPU memory is possible only with the driver; without it libfabric must
  // not initialize CUDA either.
  Status cuda = settings.cuda ? memory::cuda::Load(settings.cuda_library) : Status::Unavailable("KVF_CUDA=0");
  if (!cuda.ok()) KVF_LOG_DEBUG("host memory only ({}): FI_HMEM=system", cuda.message());
  fabric::ApplyProviderDefaults(settings.rxm_fast_connect, /*host_memory_only=*/!cuda.ok());
  return cuda;
}

Status Engine::Create(const EngineConfig& config, std::unique_ptr<Engine>* out) {
  auto impl = std::make_unique<Impl>();
  impl->settings = config.settings;
  if (config.apply_environment) KVF_RETURN_IF_ERROR(impl->settings.ApplyEnvironment());
  if (!log::SetLevel(impl->settings.log_level))
    return Status::InvalidArgument("KVF_LOG_LEVEL='" + impl->settings.log_level +
                                   "': use trace, debug, info, warn, error or off");
  if (metadata::IsStoreUri(config.metadata))
    KVF_RETURN_IF_ERROR(metadata::OpenMetadataStore(config.metadata, impl->settings, &impl->store));
  else if (!IsP2p(config.metadata))
    return Status::InvalidArgument("metadata '" + config.metadata +
                                   "': use p2p (or P2PHANDSHAKE), etcd://host:port[,host:port] or http://host:port/path");
  std::string host;
  uint16_t port = 0;
  KVF_RETURN_IF_ERROR(metadata::ParseHostPort(config.local_server_name, &host, &port)
                          .Annotate("local_server_name"));
  metadata::SocketAddress handshake_addr;
  KVF_RETURN_IF_ERROR(metadata::ResolveHost(host, &handshake_addr).Annotate("local_server_name"));
  // Only the handshake and the metadata go over IPv6: the fabric's data path
  // stays IPv4, and SelectDomains picks the tcp interface by its IPv4
  // address. So an IPv6 host asks for loopback (::1) or else the first
  // non-loopback interface ("").
  const bool v6 = handshake_addr.family() == AF_INET6;
  std::string bind_ip = !v6 ? handshake_addr.ip() : handshake_addr.loopback() ? "127.0.0.1" : "";

  const Status cuda = PrepareLibfabric(impl->settings);
  std::string provider;
  const bool auto_protocol = config.protocol == "auto";
  if (auto_protocol) {
    provider = fabric::ProviderAvailable("efa") ? "efa" : "tcp;ofi_rxm";
  } else {
    KVF_RETURN_IF_ERROR(fabric::ProviderForProtocol(config.protocol, &provider));
  }
  KVF_RETURN_IF_ERROR(impl->OpenProvider(provider, config.nic_filter, bind_ip, &impl->primary_rails)
                          .Annotate("protocol " + config.protocol));
  if (auto_protocol && impl->settings.same_host_shm && provider != "shm") {
    std::vector<size_t> shm;
    Status s = impl->OpenProvider("shm", "", bind_ip, &shm);
    if (s.ok() && !shm.empty()) impl->shm_rail = static_cast<int>(shm.front());
    else KVF_LOG_INFO("same-host shm rail not available ({}); same-host peers use {}", s.ToString(), provider);
  }

  std::random_device rd;
  impl->epoch = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
  std::vector<fabric::Rail*> raw;
  for (auto& r : impl->rails) raw.push_back(r.get());
  impl->topo = topology::Topology::Discover(impl->rail_infos);
  // cuda:N as the driver numbers it, for each GPU's nearest rails
  if (cuda.ok()) impl->topo.SetCudaOrdinals(memory::cuda::PciBusIds());
  if (!impl->settings.topology_file.empty())
    KVF_RETURN_IF_ERROR(impl->topo.ApplyFile(impl->settings.topology_file).Annotate("KVF_TOPOLOGY_FILE"));
  Impl* tp = impl.get();
  impl->registry = std::make_unique<memory::MemoryRegistry>(
      raw, static_cast<size_t>(impl->settings.mr_chunk_bytes), [tp](const std::string& location) {
        std::vector<size_t> near, rest;
        tp->topo.RailsFor(location, &near, &rest);
        uint64_t mask = 0;
        for (size_t r : near) mask |= uint64_t{1} << r;
        return mask;
      });
  impl->registry->set_cuda(impl->settings.cuda);

  metadata::HandshakeServer::Options so;
  so.host = handshake_addr.ip();
  so.port = port;
  so.timeout_ms = impl->settings.handshake_timeout_ms;
  so.max_frame = static_cast<size_t>(impl->settings.handshake_max_frame);
  so.max_connections = static_cast<size_t>(impl->settings.handshake_max_connections);
  so.auth_token = impl->settings.auth_token;
  Impl* ip = impl.get();
  KVF_RETURN_IF_ERROR(metadata::HandshakeServer::Start(
      so, [ip](uint16_t t, const std::string& p, std::string* r) { return ip->HandleRequest(t, p, r); },
      &impl->server));
  impl->name = metadata::FormatHostPort(host, impl->server->port());

  impl->progress = std::make_unique<fabric::Progress>(
      raw, static_cast<int>(impl->settings.progress_threads), impl->settings.progress_spin_us,
      impl->settings.progress_idle_us);
  {
    auto self = std::make_shared<Peer>(kSelfHandle, impl->name);
    impl->peers[kSelfHandle] = self;
    impl->peer_names[impl->name] = kSelfHandle;
  }
  KVF_RETURN_IF_ERROR(impl->Publish().Annotate("engine " + impl->name));
  KVF_LOG_INFO("engine {} ready: {} rail(s) of {}{}, {} progress thread(s){}", impl->name,
               impl->primary_rails.size(), provider, impl->shm_rail >= 0 ? " + shm for same-host peers" : "",
               impl->progress->thread_count(), impl->store ? ", segment published in " + impl->store->uri() : "");
  out->reset(new Engine(std::move(impl)));
  return Status::OK();
}

const std::string& Engine::name() const { return impl_->name; }
const Settings& Engine::settings() const { return impl_->settings; }
std::vector<RailInfo> Engine::rails() const {
  std::vector<RailInfo> out;
  for (const auto& r : impl_->rails) {
    out.push_back(r->info());
    out.back().completed_bytes = r->completed_bytes();
    out.back().peer_slots = r->peer_slots();
  }
  return out;
}

Status Engine::RegisterMemory(void* addr, size_t length, const std::string& location) {
  return RegisterMemoryBatch({{addr, length, location}});
}

Status Engine::UnregisterMemory(void* addr) { return UnregisterMemoryBatch({addr}); }

Status Engine::RegisterMemoryBatch(const std::vector<BufferEntry>& buffers) {
  // All or nothing: on a failure the buffers registered by this call are undone.
  auto undo = [&](size_t n) {
    for (size_t j = 0; j < n; ++j) impl_->registry->Unregister(buffers[j].addr);
  };
  for (size_t i = 0; i < buffers.size(); ++i) {
    Status s = impl_->registry->Register(buffers[i].addr, buffers[i].length, buffers[i].location);
    if (!s.ok()) {
      undo(i);
      return buffers.size() > 1 ? s.Annotate("buffer " + std::to_string(i)) : s;
    }
  }
  Status s = impl_->Publish();
  if (!s.ok()) {
    undo(buffers.size());
    return s.Annotate("register: peers could not be told, so nothing was registered");
  }
  return Status::OK();
}

Status Engine::UnregisterMemoryBatch(const std::vector<void*>& addrs) {
  for (size_t i = 0; i < addrs.size(); ++i)
    if (!impl_->registry->Find(reinterpret_cast<uintptr_t>(addrs[i]), 1))
      return Status::NotFound((addrs.size() > 1 ? "buffer " + std::to_string(i) + " " : std::string("buffer ")) +
                              hex::Address(reinterpret_cast<uintptr_t>(addrs[i])) +
                              " is not registered; nothing was unregistered");
  Status first;
  for (void* a : addrs) {
    Status s = impl_->registry->Unregister(a);
    if (!s.ok() && first.ok()) first = s;
  }
  // The memory is revoked either way; a stale descriptor only makes peers'
  // requests to it fail.
  Status p = impl_->Publish();
  if (!p.ok()) KVF_LOG_WARN("unregister: {}", p.ToString());
  return first;
}

Status Engine::OpenSegment(const std::string& name, SegmentHandle* out) {
  {
    std::lock_guard<std::mutex> g(impl_->peers_mu);
    auto it = impl_->peer_names.find(name);
    if (it != impl_->peer_names.end()) {
      *out = it->second;
      return Status::OK();
    }
  }
  std::shared_ptr<const metadata::SegmentDesc> d;
  KVF_RETURN_IF_ERROR(impl_->FetchDesc(name, &d).Annotate("open segment " + name));
  std::lock_guard<std::mutex> g(impl_->peers_mu);
  auto it = impl_->peer_names.find(name);
  if (it != impl_->peer_names.end()) {  // opened concurrently
    *out = it->second;
    return Status::OK();
  }
  auto peer = std::make_shared<Peer>(impl_->next_handle, name);
  KVF_RETURN_IF_ERROR(impl_->InstallDesc(peer.get(), std::move(d)));
  impl_->peers[peer->handle()] = peer;
  impl_->peer_names[name] = peer->handle();
  *out = impl_->next_handle++;
  return Status::OK();
}

Status Engine::CloseSegment(SegmentHandle handle) {
  if (handle == kSelfHandle) return Status::InvalidArgument("the engine's own segment cannot be closed");
  std::lock_guard<std::mutex> g(impl_->peers_mu);
  auto it = impl_->peers.find(handle);
  if (it == impl_->peers.end()) return Status::NotFound("unknown segment handle " + std::to_string(handle));
  // Its AV slots leave once the operations still using them are done.
  for (const auto& [rail, slot] : it->second->ReleaseSlots()) impl_->rails[rail]->RemovePeer(slot);
  impl_->peer_names.erase(it->second->name());
  impl_->peers.erase(it);
  return Status::OK();
}

Status Engine::GetSegmentBuffers(SegmentHandle handle, std::vector<RemoteBuffer>* out) {
  out->clear();
  if (handle == kSelfHandle) {
    for (const auto& b : impl_->registry->Snapshot()) out->push_back({b->addr, b->length, b->location});
    return Status::OK();
  }
  auto peer = impl_->FindPeer(handle);
  if (!peer) return Status::NotFound("unknown segment handle " + std::to_string(handle));
  std::shared_ptr<const metadata::SegmentDesc> d;
  KVF_RETURN_IF_ERROR(impl_->FetchDesc(peer->name(), &d));
  KVF_RETURN_IF_ERROR(impl_->InstallDesc(peer.get(), d));
  for (const auto& b : d->buffers) out->push_back({b.addr, b.length, b.location});
  return Status::OK();
}

Status Engine::Warmup(const std::string& name) {
  SegmentHandle h;
  KVF_RETURN_IF_ERROR(OpenSegment(name, &h).Annotate("warmup"));
  if (h == kSelfHandle) return Status::OK();
  auto peer = impl_->FindPeer(h);
  if (!peer) return Status::NotFound("warmup " + name + ": segment closed concurrently");
  const auto usable = peer->usable_rails();  // keeps the list alive through the loop
  for (size_t r : *usable) {
    fi_addr_t a;
    KVF_RETURN_IF_ERROR(peer->Resolve(impl_->rails[r].get(), &a).Annotate("warmup " + name));
  }
  return Status::OK();
}

Status Engine::Probe(const std::string& name) {
  std::string reply;
  return metadata::HandshakeCall(name, metadata::kProbe, "", impl_->call_options(), &reply)
      .Annotate("probe " + name);
}

Status Engine::SendNotify(const std::string& name, const std::string& message) {
  std::string reply;
  return metadata::HandshakeCall(name, metadata::kNotify, message, impl_->call_options(), &reply)
      .Annotate("notify " + name);
}

Status Engine::GetNotifies(std::vector<std::string>* out) {
  std::lock_guard<std::mutex> g(impl_->notify_mu);
  out->assign(std::make_move_iterator(impl_->notifies.begin()), std::make_move_iterator(impl_->notifies.end()));
  impl_->notifies.clear();
  return Status::OK();
}

Status Engine::AllocateBatch(size_t capacity, BatchId* out) {
  if (capacity == 0) return Status::InvalidArgument("batch capacity must be at least 1");
  if (capacity > (1u << 24)) return Status::InvalidArgument("batch capacity above 16M requests");
  std::lock_guard<std::mutex> g(impl_->batches_mu);
  impl_->ReapZombiesLocked();
  BatchId id = impl_->next_batch++;
  impl_->batches[id] = std::make_shared<Batch>(id, capacity);
  *out = id;
  return Status::OK();
}

Status Engine::Submit(BatchId batch_id, const std::vector<TransferRequest>& requests) {
  auto batch = impl_->FindBatch(batch_id);
  if (!batch) return Status::NotFound("unknown batch " + std::to_string(batch_id));
  if (requests.empty()) return Status::OK();
  std::vector<Impl::Plan> plans(requests.size());
  for (size_t i = 0; i < requests.size(); ++i)
    KVF_RETURN_IF_ERROR(impl_->Validate(requests[i], i, &plans[i]));
  size_t first = 0;
  if (!batch->Reserve(requests.size(), &first))
    return Status::InvalidArgument("batch " + std::to_string(batch_id) + " has room for " +
                                   std::to_string(batch->capacity() - batch->used()) + " more request(s), not " +
                                   std::to_string(requests.size()) + "; allocate a larger batch");
  std::vector<fabric::Slice> scratch;
  for (size_t i = 0; i < plans.size(); ++i) {
    engine::Task& task = batch->task(first + i);
    const Impl::Plan& p = plans[i];
    if (!p.peer) {  // own segment: a local copy, never a trip through the NIC
      const TransferRequest& r = *p.req;
      void* remote = reinterpret_cast<void*>(r.remote_addr);
      void* dst = r.opcode == OpCode::kWrite ? remote : r.local;
      const void* src = r.opcode == OpCode::kWrite ? r.local : remote;
      // GPU memory on either side: a device copy under that device.
      const int device = p.local->device >= 0 ? p.local->device : p.self_remote->device;
      Status copied;
      if (device >= 0) copied = memory::cuda::Copy(dst, src, r.length, device);
      else std::memmove(dst, src, r.length);
      task.Start(batch.get(), 0, Clock::now(), 0, "local copy");
      task.Complete(copied.ok() ? r.length : 0, copied);
      continue;
    }
    Status s = impl_->Post(batch.get(), &task, p, &scratch);
    if (!s.ok()) {
      task.Start(batch.get(), 0, Clock::now(), 0, "request");
      task.Complete(0, s);
    }
  }
  return Status::OK();
}

Status Engine::GetTaskStatus(BatchId batch_id, size_t task, TransferStatus* out) {
  auto batch = impl_->FindBatch(batch_id);
  if (!batch) return Status::NotFound("unknown batch " + std::to_string(batch_id));
  if (task >= batch->used())
    return Status::OutOfRange("batch " + std::to_string(batch_id) + " has " + std::to_string(batch->used()) +
                              " task(s); no task " + std::to_string(task));
  *out = batch->task(task).Snapshot();
  return Status::OK();
}

Status Engine::GetBatchStatus(BatchId batch_id, TransferStatus* out) {
  auto batch = impl_->FindBatch(batch_id);
  if (!batch) return Status::NotFound("unknown batch " + std::to_string(batch_id));
  *out = batch->Aggregate();
  return Status::OK();
}

Status Engine::WaitBatch(BatchId batch_id, int64_t timeout_ms, TransferStatus* out) {
  auto batch = impl_->FindBatch(batch_id);
  if (!batch) return Status::NotFound("unknown batch " + std::to_string(batch_id));
  auto until = timeout_ms < 0 ? Clock::time_point::max() : Clock::now() + std::chrono::milliseconds(timeout_ms);
  batch->Wait(until);
  *out = batch->Aggregate();
  return Status::OK();
}

Status Engine::FreeBatch(BatchId batch_id) {
  std::lock_guard<std::mutex> g(impl_->batches_mu);
  auto it = impl_->batches.find(batch_id);
  if (it == impl_->batches.end()) return Status::NotFound("unknown batch " + std::to_string(batch_id));
  if (!it->second->AllDone())
    return Status::Busy("batch " + std::to_string(batch_id) + " still has requests in flight; wait for them first");
  if (it->second->outstanding_slices().load() > 0) impl_->zombies.push_back(it->second);
  impl_->batches.erase(it);
  impl_->ReapZombiesLocked();
  return Status::OK();
}

Status Engine::Transfer(const std::vector<TransferRequest>& requests) {
  if (requests.empty()) return Status::OK();
  BatchId id;
  KVF_RETURN_IF_ERROR(AllocateBatch(requests.size(), &id));
  Status s = Submit(id, requests);
  if (s.ok()) {
    TransferStatus st;
    s = WaitBatch(id, -1, &st);
    if (s.ok() && st.state != TaskState::kCompleted) s = st.error;
  }
  FreeBatch(id);
  return s;
}

}  // namespace kvfabric
