// Rail: one NIC (libfabric domain) with ONE shared FI_EP_RDM endpoint serving
// every peer. Peers are AV slots. Posting is serialized per rail (RDM
// endpoints are not safe for concurrent fi_write/fi_read, even under
// FI_THREAD_SAFE on EFA), paced by credits taken from the depths the provider
// reports, with a pending queue instead of failures when out of credit.
// Its peers are kept in a PeerTable, its health (throughput, stalls) in a
// RailHealth. Its code, by role: rail.cc (opening, closing, registration),
// rail_peers.cc, rail_posting.cc (posting, credits, completions) and
// rail_stall.cc.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fabric/efa_options.h"
#include "fabric/mr_request.h"
#include "fabric/peer_table.h"
#include "fabric/rail_counters.h"
#include "fabric/rail_health.h"
#include "fabric/rail_info.h"
#include "fabric/rail_options.h"
#include "fabric/shm_regions.h"
#include "fabric/slice.h"
#include "kvfabric/status.h"

namespace kvfabric::fabric {

// What peers may do with a registration (its FI_REMOTE_* access bits).
enum class PeerAccess { kNone, kRead, kReadWrite };

// One memory registration on one rail.
class MemoryRegion {
 public:
  MemoryRegion() = default;
  ~MemoryRegion();
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;
  void* desc() const { return desc_; }
  uint64_t key() const { return key_; }

 private:
  friend class Rail;
  fid_mr* mr_ = nullptr;
  void* desc_ = nullptr;
  uint64_t key_ = 0;
};

class Rail {
 public:
  // Opens fabric, domain, AV (FI_AV_TABLE), CQ and the shared endpoint of
  // `info`, run as `options` say; `index` is its place among the engine's rails.
  static Status Open(const fi_info* info, const RailOptions& options, size_t index,
                     std::unique_ptr<Rail>* out);
  ~Rail();
  Rail(const Rail&) = delete;
  Rail& operator=(const Rail&) = delete;

  size_t index() const { return index_; }
  const std::string& label() const { return label_; }
  const RailInfo& info() const { return info_; }
  // The endpoint's raw address (fi_getname), published in the segment.
  const std::string& address() const { return address_; }
  // FI_MR_VIRT_ADDR: remote addresses are virtual addresses, else MR offsets.
  bool virt_addr() const { return info_.virt_addr; }

  // Address vector. `pid` is the peer process when it is on this host (0
  // otherwise): on shm the rail checks it is alive before posting, because
  // libfabric's shm provider spins forever posting into a dead peer's region.
  Status InsertPeer(const std::string& raw_address, int64_t pid, fi_addr_t* out);
  // Undoes one InsertPeer of `slot` (its peer restarted, or its segment was
  // closed). The progress thread removes the entry (fi_av_remove; on shm it
  // closes the peer's endpoint too) once nothing is queued or in flight to
  // it; until then the slot stays valid for the operations that use it.
  void RemovePeer(fi_addr_t slot);
  // Closes this rail's connection to the peer at `slot` when operations
  // are posted to it, so that none of them writes local memory once this
  // returns: the provider fails them at once (NetworkError). For a request
  // that outlived its deadline (engine::Rerouter::CutConnections), and for
  // a stalled rail's operations before they move (CheckStall); `why` says
  // which in the log line. Only where
  // removing an address closes its connection (rxm: tcp, verbs, with
  // AvRemoveClosesConnections): the address is inserted a second time
  // first, so the slot stays valid and the next post connects anew. False
  // when it closed nothing (no operation in flight, or a provider that
  // cannot: shm copies a READ itself, efa has no connections).
  bool CutPeer(fi_addr_t slot, std::string_view why);
  // Where the slices of `owner` to the peer at `slot` are on this rail, for
  // a request's Timeout message: waiting in the queue (and how long the
  // provider has refused posts to that peer), or posted (handed to the
  // provider, not yet back). Takes the rail's locks; walks the queue and
  // every context (a diagnostic, not a fast path). The posted count reads
  // contexts that the progress thread may be finishing meanwhile (outside
  // the locks): an operation that completes at that moment may be counted
  // or not.
  struct Whereabouts {
    size_t queued = 0, posted = 0;
    int64_t refused_ms = 0;  // the peer's current run of refused posts; 0: none
    // The rail's own state: every slice in its queue, its contexts free
    // (of tx_depth), and how long ago its progress thread last polled it.
    size_t rail_queued = 0, free_contexts = 0;
    int64_t queued_count = 0;  // the queue's counter (queued_), which should equal rail_queued
    int64_t since_poll_ms = -1;  // -1: never polled
    int64_t since_drain_ms = -1, since_post_ms = -1;  // the last drain of the queue, the last post it made
    size_t queued_refused = 0;  // slices in the queue whose peers the provider refuses
  };
  Whereabouts WhereaboutsOf(const SliceOwner* owner, fi_addr_t slot);
  // AV slots in use: inserted and not yet removed.
  size_t peer_slots();

  // Registers `m` for local access and for what `peers` may do with it:
  // READ and WRITE (kReadWrite), only READ (kRead: the provider refuses a
  // peer's WRITE whatever key it holds), or nothing (kNone: staging
  // buffers, no peer may touch them, whatever key it guesses). GPU memory (m.cuda_device >= 0) needs hmem(); its
  // dma-buf is used where dmabuf() says so, and a provider that refuses the
  // dma-buf gets the device address instead (said once, and dmabuf() turns
  // false).
  Status RegisterMemory(const MemorySource& m, std::unique_ptr<MemoryRegion>* out,
                        PeerAccess peers = PeerAccess::kReadWrite);
  // Host memory.
  Status RegisterMemory(void* addr, size_t len, std::unique_ptr<MemoryRegion>* out,
                        PeerAccess peers = PeerAccess::kReadWrite) {
    return RegisterMemory(MemorySource{addr, len}, out, peers);
  }
  // The provider registers GPU memory (FI_HMEM granted), so the NIC reads
  // and writes it in place.
  bool hmem() const { return hmem_; }
  // What the efa provider said of this endpoint (RNR retry, emulated
  // READ/WRITE); empty on other providers.
  const EfaEndpointReport& efa_report() const { return efa_report_; }
  // GPU memory is registered by dma-buf where the driver exports one.
  bool dmabuf() const { return dmabuf_.load(std::memory_order_relaxed); }

  // Queues slices and posts as many as credits allow. Never fails: a slice
  // that cannot be posted now stays queued; one the provider rejects is
  // completed with the error. With `post_now` false the progress thread posts
  // them (for callers that may hold another rail's post lock).
  void Enqueue(Slice* slices, size_t n, bool post_now = true);
  // Reads the CQ, completes slices, returns their credits and posts queued
  // slices. Called by the progress thread. Returns completions seen.
  size_t Poll();
  // After a Poll whose posting burst (RailOptions::post_burst) ended with
  // slices still queued: poll again at once, there is posting to do.
  bool BurstLeftPosts() const { return burst_left_posts_; }
  // Work in flight or queued (or between the two, being posted): the
  // progress thread keeps polling while true, and Engine::Close waits for
  // it to turn false.
  bool Busy() const { return unfinished_.load(std::memory_order_relaxed) > 0; }
  // Bytes queued or in flight: what a new slice waits behind.
  uint64_t load_bytes() const { return load_bytes_.load(std::memory_order_relaxed); }
  uint64_t completed_bytes() const { return completed_bytes_.load(std::memory_order_relaxed); }
  // What the rail did since it opened (operations, errors, stalls).
  const RailCounters& counters() const { return counters_; }
  // Now: operations waiting for a credit, and credits in use.
  uint64_t queued() const { return static_cast<uint64_t>(std::max<int64_t>(0, queued_.load(std::memory_order_relaxed))); }
  uint64_t in_flight() const { return static_cast<uint64_t>(std::max<int64_t>(0, inflight_.load(std::memory_order_relaxed))); }
  // Bytes per second this rail drained while it had a backlog (its capacity
  // as last seen), or 0 when not measured within the last `max_age_ns`.
  double Throughput(int64_t now_ns, int64_t max_age_ns) const { return health_.Throughput(now_ns, max_age_ns); }
  // False while the rail is out of service after a stall (KVF_RAIL_STALL_MS),
  // until KVF_RAIL_RETRY_MS pass or something completes on it again.
  // After that, until something completes, it is on probation: it takes new
  // work only when idle, so a link still down costs one request's worth of
  // stall per period, not a full share of the traffic.
  bool InService(int64_t now_ns) const { return health_.InService(now_ns, load_bytes()); }

  // Bytes of remote CQ data a WRITE carries on this rail (fi_domain(3)
  // cq_data_size: 0 where the provider has none, else at least 4).
  size_t cq_data_size() const { return cq_data_size_; }
  // Who is told, on the progress thread, of the remote CQ data of each
  // peer's WRITE to this rail, once its bytes have landed. Set before peers
  // write; without a sink the data is counted (counters().remote_data) and
  // dropped.
  void set_remote_data_sink(std::function<void(uint64_t)> sink) { remote_data_sink_ = std::move(sink); }

  // Progress thread: true when peers' READs or WRITEs targeted this rail's
  // endpoint since the last call (a remote-access counter, where the
  // provider offers one: shm). A passive target sees no completions for
  // them, and without this would sleep while serving.
  bool TakeRemoteActivity();

  // Before the endpoints close (Engine::Close, while the progress thread
  // still runs): queues a 1-byte READ on each peer endpoint that may have
  // sent its name without the peer having read it (PeerTable::NameMayBeUnread;
  // shm only). The READ is taken only once the peer has read the name, so
  // Busy() stays true until then, the peer's process is gone, or the
  // provider refused it for RailOptions::refused_period, counted from the
  // probe's queuing (a run of refusals before it does not count). Removed
  // peers get the same probe before their endpoint closes
  // (ReapRemovedPeers). A waiting probe never makes the rail stall.
  void ProbeUnreadNames();

  // CQ wait object (an fd for epoll), or -1 when the provider has none.
  int wait_fd() const { return wait_fd_; }
  // fi_trywait on the CQ: true when it is safe to block on wait_fd().
  bool TryWait();
  // Called after Enqueue so a sleeping progress thread wakes up.
  void set_waker(std::function<void()> w) { waker_ = std::move(w); }

 private:
  using RemotePeer = PeerTable::Peer;
  struct OpContext {
    fi_context2 ctx;  // first: the provider hands this pointer back in the CQ
    Slice slice;
    RemotePeer* peer = nullptr;  // set while posted
    bool posted = false;         // handed to the provider, not yet returned
    bool detached = false;       // its owner moved it elsewhere after a stall (rails that cannot cut)
  };

  // Names the rail from `info` and takes the options that need no libfabric
  // call; Open does the rest.
  Rail(const fi_info* info, const RailOptions& options, size_t index);
  // Open's steps: the fabric, domain and address vector; the CQ (waitable
  // where the provider allows; `depth` lowered to what it holds); the
  // shared endpoint, bound, enabled and named.
  Status OpenDomain(const fi_info* info);
  Status OpenCq(const RailOptions& options, size_t* depth);
  Status OpenEndpoint(const fi_info* info, const RailOptions& options);
  // The remote-access counter (TakeRemoteActivity), where the provider has one.
  void OpenRemoteCounter();
  // The owner of name probes (ProbeUnreadNames): nobody waits for them.
  static SliceOwner* NameProbe();
  // Posts queued slices while credits last; caller holds post_mu_. With
  // `burst_ns` > 0, stops once its posts have taken that long and returns
  // true (slices are left for the caller's next poll, after it has read
  // the completions); false when it stopped for another reason.
  bool DrainLocked(int64_t burst_ns);
  int PostOne(OpContext* op);
  void Finish(OpContext* op, const Status& error);
  void ReleaseContext(OpContext* op);
  // Ends a slice that never reached the provider (context back in the pool).
  void FailUnposted(OpContext* op, const Status& error);
  // Drains the queue unless another thread is (DrainLocked with
  // `burst_ns`: Poll passes post_burst_ns_, a submitter posting directly 0).
  // True when the burst ended with slices still queued.
  bool KickPosting(int64_t burst_ns);
  // False when `p` is a same-host peer whose process has exited (see
  // PeerTable::Alive; reads the clock only for such peers).
  bool PeerAlive(RemotePeer* p);
  // shm: sets info_copy_'s source address to a new ShmEndpointName and
  // returns it (the next fi_endpoint takes it); other providers: "".
  std::string NameShmEndpoint();
  // Closes a peer's own endpoint (shm) and lets go of its region's hold.
  // Caller holds cq_mu_ (or is the destructor).
  void ClosePeerEndpointLocked(fid_ep* ep);
  // Takes `hold` on the region named `name` (nothing for ""); a failure is
  // logged, not returned: the endpoint works without it.
  void HoldShmRegion(const std::string& name, ShmRegionHold* hold);
  // Reads up to 64 completions and finishes their slices.
  size_t ReadCompletions();
  // Progress thread only: closes the endpoints of dead peers, drains the CQ,
  // then fails (and takes back the credits of) their operations that can no
  // longer complete.
  void ReapDeadPeers();
  // Progress thread: carries out RemovePeer for slots now quiet, after a
  // name probe for those whose name may be unread.
  void ReapRemovedPeers();
  // Queues the name probe of ProbeUnreadNames for `p` at `slot`; caller
  // holds post_mu_.
  void QueueNameProbeLocked(fi_addr_t slot, RemotePeer* p);
  // Progress thread: when health_ finds the rail stalled (work in flight
  // and nothing completing for KVF_RAIL_STALL_MS), moves its posted
  // operations as ActionOnStalledPeer says for each peer (closing the
  // connection where the rail may: cuts_stalled_connections_) and offers
  // every queued slice to its owner to move elsewhere; the rail is then
  // out of service for KVF_RAIL_RETRY_MS.
  void CheckStall(int64_t now);
  struct StallMoves {
    size_t moved = 0, kept = 0, cut = 0;  // slices moved, left in place; peers whose connection closed
  };
  void MovePostedOnStall(StallMoves* moves);
  void MoveQueuedOnStall(StallMoves* moves);
  // Offers a posted operation to its owner; moved, it is detached (the
  // provider keeps it, and it may still complete).
  void OfferStalled(OpContext* op, StallMoves* moves);
  // When every slice queued waits for a peer in a run of refused posts, the
  // latest start of those runs; 0 when some does not (or none waits).
  // Takes the post and queue locks.
  int64_t LatestRefusalOfWaitingPeers();
  // `peer`'s address as libfabric prints it (fi_av_straddr), for log lines.
  std::string PeerText(const PeerTable::Peer& peer) const;

  const size_t index_;
  RailInfo info_;
  std::string label_;  // "rail 2 (tcp;ofi_rxm lo)": how messages name this rail
  std::string address_;
  bool prov_key_ = false;
  bool hmem_ = false;
  EfaEndpointReport efa_report_;
  std::atomic<bool> dmabuf_{false};
  uint64_t write_flags_ = 0;
  size_t cq_data_size_ = 0;
  std::function<void(uint64_t)> remote_data_sink_;
  bool post_from_progress_ = false;
  uint64_t key_mask_ = ~0ull;  // the bits of a key the provider holds (mr_key_size)

  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  fid_cntr* remote_cntr_ = nullptr;  // FI_REMOTE_READ | FI_REMOTE_WRITE on ep_ (shm), or null
  uint64_t remote_seen_ = 0;         // its value at the last TakeRemoteActivity (progress thread)
  int wait_fd_ = -1;

  std::mutex post_mu_;   // held while calling fi_write/fi_read
  // Held around fi_cq_read and while a per-peer endpoint is bound and enabled:
  // reading the CQ progresses every bound endpoint, and shm crashes on one not
  // yet enabled. Lock order: post_mu_, then cq_mu_.
  std::mutex cq_mu_;
  std::mutex queue_mu_;  // guards pending_ and free_
  std::deque<Slice> pending_;
  std::vector<OpContext*> free_;  // credits: one free context = one credit
  std::unique_ptr<OpContext[]> contexts_;
  std::atomic<int64_t> last_poll_ns_{0};   // when Poll last ran (WhereaboutsOf)
  std::atomic<int64_t> last_drain_ns_{0};  // when DrainLocked last ran
  std::atomic<int64_t> last_post_ns_{0};   // when it last posted
  std::atomic<int64_t> inflight_{0};
  std::atomic<int64_t> queued_{0};
  // Slices enqueued and not yet finished, failed or moved to another rail:
  // queued, in flight, or between the two. One counter, so that Busy()
  // never sees a slice in passing between queued_ and inflight_ (a refused
  // post goes back to the queue) as no work at all.
  std::atomic<int64_t> unfinished_{0};
  // Name probes (ProbeUnreadNames) in pending_: not counted as waiting
  // work by CheckStall.
  std::atomic<int64_t> probes_queued_{0};
  std::atomic<uint64_t> load_bytes_{0};
  std::atomic<uint64_t> completed_bytes_{0};
  RailCounters counters_;
  RailHealth health_;
  int64_t refused_ns_ = 0;  // RailOptions::refused_period
  int64_t post_burst_ns_ = 0;  // RailOptions::post_burst: the progress thread's drains (Poll)
  bool burst_left_posts_ = false;  // progress thread: BurstLeftPosts
  std::function<void()> waker_;

  fi_info* info_copy_ = nullptr;  // for the endpoints (shm: named by NameShmEndpoint)
  // shm: the locks that keep this process's regions from being taken for
  // abandoned (shm_regions.h); per-peer ones guarded by cq_mu_, and each
  // dropped when its endpoint closes (an open file keeps an unlinked
  // region's memory).
  ShmRegionHold main_hold_;
  std::unordered_map<fid_ep*, ShmRegionHold> peer_holds_;
  bool per_peer_ep_ = false;
  bool cuts_connections_ = false;          // CutPeer can close a peer's connection
  bool cuts_stalled_connections_ = false;  // and CheckStall may use it
  PeerTable peers_;  // guarded by post_mu_ (see PeerTable for what is not)
};

}  // namespace kvfabric::fabric
