// PeerTable: the peers one rail knows, by address-vector slot (FI_AV_TABLE
// slots are small integers). It keeps the bookkeeping: how many inserts of a
// slot are not yet undone, removals waiting for the slot to go quiet, and on
// shm the peer's own endpoint and whether its process still lives. It makes
// no libfabric call: it tells its rail which endpoints to close and which
// slots to fi_av_remove, and the rail does it.
//
// Threads: the owning rail calls everything under its post lock, except
// Peer::inflight (atomic: a completion decrements it without the lock), and
// TakeDeadFound, removals_pending and BusyCheckDue, which the progress thread
// calls first to learn whether to take the lock at all.
#pragma once

#include <rdma/fabric.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kvfabric::fabric {

// Whether process `pid` exists on this host (kill(pid, 0) does not fail with
// ESRCH).
bool ProcessExists(int64_t pid);

class PeerTable {
 public:
  // A peer by slot. Pointers stay valid while the slot is in use: an
  // operation in flight keeps one.
  struct Peer {
    // shm only: this peer's own transmit endpoint. shm completes operations
    // strictly in order per endpoint, so one dead peer would wedge a shared
    // endpoint for everyone; with its own, only its endpoint is lost.
    fid_ep* ep = nullptr;
    std::string address;   // the raw address inserted at this slot
    int64_t pid = 0;       // same-host peer process (shm), 0 if unknown
    bool dead = false;     // its process has exited
    bool cleaned = false;  // dead, and its endpoint was handed over for closing
    int refs = 0;          // inserts not yet undone by a removal
    int removals = 0;      // removals waiting for the slot to go quiet
    int64_t checked_ns = 0;  // last liveness check
    int64_t refused_since_ns = 0;  // start of its run of refused posts (RefusedTooLong); 0: none
    int64_t refused_last_ns = 0;   // the run's latest refusal
    std::atomic<int64_t> inflight{0};  // operations posted to it, not yet completed
    // Rail::CutPeer closed its connection, and no post was taken since:
    // what is still in flight was flushed already (another cut is moot).
    bool cut_since_post = false;
    // shm, its own endpoint `ep`: a fresh endpoint's first post to the peer
    // sends the endpoint's name and is refused (-FI_EAGAIN) until the peer
    // has read it; the peer reads it on its own schedule (see NameMayBeUnread).
    bool name_sent = false;   // a post on `ep` was refused before any was taken
    bool name_read = false;   // a post on `ep` was taken: the peer read the name
    bool name_probe = false;  // a probe READ was queued to learn it (Rail::ProbeUnreadNames)
    uint64_t probe_addr = 0;  // remote address and key of a refused post: something to READ
    uint64_t probe_key = 0;
  };

  // A slot whose last reference went, now quiet: one fi_av_remove to make on
  // `slot`, after closing `close_ep` when it is not null (shm: the peer's
  // own endpoint goes first).
  struct Removal {
    fi_addr_t slot = 0;
    fid_ep* close_ep = nullptr;
  };

  // Checks a peer process at most once per this period.
  static constexpr int64_t kCheckPeriodNs = 1000000;
  // With operations in flight and nothing completing, busy peers are
  // checked at most once per this period (CheckBusyPeers).
  static constexpr int64_t kBusyCheckPeriodNs = 100000000;

  // `where` names the rail in log lines ("rail 0 (shm)"); `process_exists`
  // answers liveness checks (tests pass a fake).
  explicit PeerTable(std::string where, std::function<bool(int64_t pid)> process_exists = ProcessExists);
  PeerTable(const PeerTable&) = delete;
  PeerTable& operator=(const PeerTable&) = delete;

  // The peer at `slot`, or null if the slot was never inserted.
  Peer* At(fi_addr_t slot) { return slot < peers_.size() ? peers_[slot].get() : nullptr; }
  // The peer at `slot`, created empty when there is none yet: the rail
  // inserted an address and libfabric returned `slot`.
  Peer* Slot(fi_addr_t slot);
  // Slots the table has records for (in use or not).
  size_t size() const { return peers_.size(); }

  // One more user of `slot`: the rail inserted an address there, or found
  // it already there (FindLive) and inserted nothing. libfabric holds ONE
  // insert per slot in use, whatever the number of users: shm's
  // fi_av_remove unmaps the peer's region however many inserts of its
  // address remain, so a second insert could never be undone safely.
  // A new insert (or a restarted peer at the same address) also ends the
  // slot's run of refusals: it gets a fresh chance to connect.
  void AddRef(fi_addr_t slot) {
    Peer* p = Slot(slot);
    ++p->refs;
    Taken(p);
  }
  // The slot in use (refs > 0) that holds `address`, if any.
  bool FindLive(const std::string& address, fi_addr_t* slot) const;

  // Drops one reference of `slot` once the slot goes quiet (see
  // TakeQuietRemovals). False, and nothing recorded, when every reference
  // of the slot is already dropped or being dropped; true when the caller
  // should wake the progress thread.
  bool Remove(fi_addr_t slot);
  // Some removal waits for its slot to go quiet.
  bool removals_pending() const { return removals_pending_.load(std::memory_order_relaxed); }

  // Drops the references waiting for their slot to go quiet (nothing in
  // flight, nothing queued: `queued[slot]`; slots past its end have nothing
  // queued), and returns the slots whose last reference went: the caller
  // closes their endpoints and calls fi_av_remove. Such a slot gets a fresh
  // record, so a later insert that reuses it starts afresh.
  std::vector<Removal> TakeQuietRemovals(const std::vector<bool>& queued);

  // Slots in use: inserted and not yet removed.
  size_t slots_in_use() const;

  // False when `p` is a same-host peer (pid set) whose process has exited.
  // The process is checked at most once per kCheckPeriodNs; the first time
  // it is found gone, `p` is marked dead, a warning is logged and
  // TakeDeadFound turns true. A null `p` or pid 0 is alive.
  bool Alive(Peer* p, int64_t now_ns);
  // A run of refusals: posts to a peer with nothing in flight to it, each
  // refused (-FI_EAGAIN), none more than kRefusalGapNs after the one
  // before (queued work is retried every poll, so a longer gap means no
  // work was waiting for the peer, and the next refusal starts a new run).
  static constexpr int64_t kRefusalGapNs = 100000000;
  // The provider refused a post to `p` at `now_ns`. True when that extends
  // a run of refusals at least `limit_ns` long: tcp's rxm refuses for ever
  // every post to a peer it cannot connect to (one that died, or whose
  // address cannot be reached), so the peer's waiting operations should
  // fail. A refusal while operations to `p` are in flight is the
  // provider's flow control, not the peer's absence: it ends the run.
  // False for a null `p` or a `limit_ns` <= 0.
  static bool RefusedTooLong(Peer* p, int64_t now_ns, int64_t limit_ns);
  // Whether `p`'s own endpoint may have sent the peer its name without the
  // peer having read it yet, and no probe was queued to learn it: true for
  // a peer with an endpoint, a refused post, no taken post, no probe, and
  // not known dead. libfabric's shm before 2.0 crashes a peer that reads
  // the name of an endpoint that closed meanwhile (prov/shm
  // smr_progress_connreq maps the name's region, finds none, and
  // dereferences it), so such an endpoint must not close until a post on
  // it is taken, or the peer is gone.
  static bool NameMayBeUnread(const Peer& p) {
    return p.ep != nullptr && p.name_sent && !p.name_read && !p.name_probe && !p.dead;
  }
  // A post to `p` at `remote_addr` with `remote_key` was refused
  // (-FI_EAGAIN): with its own endpoint and no post taken yet, the name may
  // have been sent, and that address is something of the peer's to READ.
  static void PostRefused(Peer* p, uint64_t remote_addr, uint64_t remote_key) {
    if (p == nullptr || p->ep == nullptr || p->name_read) return;
    p->name_sent = true;
    p->probe_addr = remote_addr;
    p->probe_key = remote_key;
  }
  // A post to `p` was taken: the peer has read the name, and its run of
  // refusals (if any) ends.
  static void PostTaken(Peer* p) {
    if (p == nullptr) return;
    p->name_read = true;
    Taken(p);
  }
  // A post to `p` was taken: its run of refusals (if any) ends.
  static void Taken(Peer* p) {
    if (p != nullptr) p->refused_since_ns = p->refused_last_ns = 0;
  }
  // The start of `p`'s run of refusals, or 0 when it has none.
  static int64_t RefusedSince(const Peer* p) { return p != nullptr ? p->refused_since_ns : 0; }
  // True once after Alive found a dead peer.
  bool TakeDeadFound() { return dead_found_.exchange(false); }
  // True when kBusyCheckPeriodNs passed since it last returned true: time
  // to CheckBusyPeers. Progress thread only; needs no lock.
  bool BusyCheckDue(int64_t now_ns);
  // Checks (Alive) every peer with operations in flight.
  void CheckBusyPeers(int64_t now_ns);

  // Dead peers not handed over yet: marks them cleaned, moves their
  // endpoints (if any) to `close` for the caller to close, and returns how
  // many there were. Their operations still in flight will never complete.
  size_t TakeDeadPeers(std::vector<fid_ep*>* close);

  // Every peer endpoint, for the caller to close (the rail closes).
  std::vector<fid_ep*> TakeEndpoints();

 private:
  const std::string where_;
  const std::function<bool(int64_t)> process_exists_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by slot
  std::atomic<bool> dead_found_{false};
  std::atomic<bool> removals_pending_{false};
  int64_t last_busy_check_ns_ = 0;
};

}  // namespace kvfabric::fabric
