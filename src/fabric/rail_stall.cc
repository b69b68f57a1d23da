// Rail: stall handling. RailHealth says when the rail is stalled (work in
// flight or waiting, nothing completing for KVF_RAIL_STALL_MS) and
// StallIsThePeers when the stall is its peers' doing; ActionOnStalledPeer
// says what becomes of each peer's posted operations. The code here acts
// on those answers: it moves the rail's work to other rails and takes it
// out of service for KVF_RAIL_RETRY_MS.
#include <algorithm>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "common/log.h"
#include "fabric/rail.h"

namespace kvfabric::fabric {

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
  // cut link, or its only peer gone) stalls.
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
  const int64_t posted_now = inflight_.load();
  StallMoves moves;
  MovePostedOnStall(&moves);
  MoveQueuedOnStall(&moves);
  KVF_LOG_WARN("{}: nothing completed for {} ms with {} operation(s) in flight; out of service for "
               "{} ms (KVF_RAIL_STALL_MS, KVF_RAIL_RETRY_MS): {} slice(s) moved to other rails, the connections of {} "
               "peer(s) closed so that their operations in flight fail and move too, {} left in place (no other rail "
               "would take them all); check the link of {}",
               label_, health_.stall_ns() / 1000000, posted_now, health_.retry_ns() / 1000000, moves.moved,
               moves.cut, moves.kept, info_.domain);
}

void Rail::MovePostedOnStall(StallMoves* moves) {
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
  constexpr const char* kWhy = "its rail stalled (KVF_RAIL_STALL_MS); those operations fail and move to other rails";
  for (const auto& [slot, ops] : peers) {
    const bool all_move =
        std::all_of(ops.begin(), ops.end(), [](const OpContext* op) { return op->slice.owner->CanMove(op->slice); });
    switch (ActionOnStalledPeer(cuts_stalled_connections_, all_move)) {
      case StalledPeerAction::kCut:
        if (CutPeer(slot, kWhy)) ++moves->cut;
        else moves->kept += ops.size();
        break;
      case StalledPeerAction::kLeave:
        moves->kept += ops.size();
        break;
      case StalledPeerAction::kOffer:
        for (OpContext* op : ops) OfferStalled(op, moves);
        break;
    }
  }
}

void Rail::OfferStalled(OpContext* op, StallMoves* moves) {
  if (!op->slice.owner->OnSliceStalled(op->slice)) {
    ++moves->kept;
    return;
  }
  // The provider still owns the context (and the registration it uses); it
  // comes back through the CQ, or never if the link stays down.
  op->detached = true;
  op->slice.owner = nullptr;
  inflight_.fetch_sub(1);
  unfinished_.fetch_sub(1);
  load_bytes_.fetch_sub(op->slice.length);
  ++moves->moved;
}

void Rail::MoveQueuedOnStall(StallMoves* moves) {
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
      ++moves->moved;
    } else {
      keep.push_back(std::move(s));
    }
  }
  if (keep.empty()) return;
  std::lock_guard<std::mutex> g(queue_mu_);
  moves->kept += keep.size();
  queued_.fetch_add(static_cast<int64_t>(keep.size()));
  pending_.insert(pending_.begin(), std::make_move_iterator(keep.begin()), std::make_move_iterator(keep.end()));
}

}  // namespace kvfabric::fabric
