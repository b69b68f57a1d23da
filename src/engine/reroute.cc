// Poster, rerouting (engine::Rerouter): a slice that failed, or whose rail
// stalled, is queued again on another rail of the same peer. Called from
// progress or posting threads, possibly with the failed rail's post lock
// held: it only queues (the progress thread posts) and never inserts AV
// entries. And a striped request's pieces not posted at once go to the
// rails whose pieces complete (PostNextPiece, on the progress thread with
// no rail's lock held; the rail reaches the peer already).
#include <algorithm>

#include "common/log.h"
#include "common/text.h"
#include "engine/poster.h"
#include "engine/rail_choice.h"

namespace kvfabric::engine {

uint32_t Poster::Reroute(Task* task, const fabric::Slice& s, bool failed) {
  const uint32_t n = MoveSlice(task, s, failed);
  if (counters_ != nullptr) {
    if (n > 0)
      counters_->Rerouted(failed);
    else
      counters_->RerouteRefused();
  }
  return n;
}

bool Poster::MoveTarget(Task* task, const fabric::Slice& s, int64_t now, size_t* to, int* peer_rail) {
  const std::shared_ptr<Peer>& peer = task->peer();
  const auto route = std::static_pointer_cast<const Route>(task->route());
  if (!peer || !route || s.owner_tag >= 0) return false;
  // Keys and slots of a restarted peer's new process do not fit this request.
  if (peer->desc()->epoch != route->desc->epoch) return false;
  size_t paired[kMaxLocalRails];
  const size_t npaired = RailsFor(*route, *peer, paired);
  if (s.attempts + 1 >= npaired) return false;  // every rail had its chance
  RailView views[kMaxLocalRails];
  rails_->View(*peer, {paired, npaired}, route->local->near_rails, now, views);
  size_t cand[kMaxLocalRails];
  const size_t ncand = CandidateRails({paired, npaired}, views, static_cast<int>(s.rail), /*fallback=*/false, cand);
  if (ncand == 0) return false;
  const uint64_t planned[kMaxLocalRails] = {};
  *to = PickRail({cand, ncand}, views, s.length, planned, NextRotation());
  *peer_rail = peer->PeerRailFor(*to, route->remote->chunks.front().keys);
  fi_addr_t unused;
  return peer->Lookup(*to, *peer_rail, &unused);  // false: not resolved yet, or reconnecting after a restart
}

bool Poster::CanReroute(Task* task, const fabric::Slice& s) {
  size_t to;
  int peer_rail;
  return MoveTarget(task, s, SteadyNowNs(), &to, &peer_rail);
}

uint32_t Poster::MoveSlice(Task* task, const fabric::Slice& s, bool failed) {
  const std::shared_ptr<Peer>& peer = task->peer();
  const auto route = std::static_pointer_cast<const Route>(task->route());
  if (!peer || !route || s.owner_tag >= 0 || peer->desc()->epoch != route->desc->epoch) return 0;
  // A stalled piece with a notice stays: were its posted copy to land after
  // a moved one, the target would count the notice's piece twice.
  if (!failed && s.has_remote_data) return 0;
  const int64_t now = SteadyNowNs();
  if (failed && peer->MarkRailDown(s.rail, now, now + options_.rail_retry_ms * 1000000))
    KVF_LOG_WARN("segment {}: an operation on rail {} ({}) failed; that rail is out of service for this peer for "
                 "{} ms (KVF_RAIL_RETRY_MS) and its work moves to the peer's other rails",
                 peer->name(), s.rail, (*rails_)[s.rail]->info().domain, options_.rail_retry_ms);
  const Peer::PostGuard posting(peer.get());  // the slot stays until the slices are queued
  size_t ri;
  int peer_rail;
  if (!MoveTarget(task, s, now, &ri, &peer_rail)) return 0;
  std::vector<fabric::Slice> out;
  Status st = MakeSlices(*route, s.write, peer.get(), ri, reinterpret_cast<uintptr_t>(s.local), s.remote_va, s.length,
                         s.attempts + 1, task, &out);
  if (!st.ok() || out.empty()) return 0;
  for (fabric::Slice& o : out) o.delivery_complete = s.delivery_complete;  // a notice follows by message
  // A notice counts its WRITE's pieces: a piece it carries moves whole or not at all.
  if (s.has_remote_data) {
    if (out.size() != 1) return 0;
    out[0].has_remote_data = true;
    out[0].remote_data = s.remote_data;
  }
  task->AddSlices(static_cast<uint32_t>(out.size()));
  (*rails_)[ri]->Enqueue(out.data(), out.size(), /*post_now=*/false);
  return static_cast<uint32_t>(out.size());
}

Status Poster::PostNextPiece(Task* task, const fabric::Slice& s) {
  const auto route = std::static_pointer_cast<const Route>(task->route());
  if (!route || !route->feed || s.owner_tag >= 0) return Status::OK();
  PieceFeed& feed = *route->feed;
  const uint64_t off = feed.next.fetch_add(feed.piece);
  if (off >= feed.end) return Status::OK();
  const std::shared_ptr<Peer>& peer = task->peer();
  if (!peer || peer->desc()->epoch != route->desc->epoch)
    return Status::NetworkError("the peer restarted while the request's pieces were being posted");
  const Peer::PostGuard posting(peer.get());  // the slot stays until the slices are queued
  std::vector<fabric::Slice> out;
  KVF_RETURN_IF_ERROR(MakeSlices(*route, feed.write, peer.get(), s.rail, route->request_local + off,
                                 route->request_remote + off, std::min(feed.piece, feed.end - off), 0, task, &out));
  for (fabric::Slice& o : out) o.delivery_complete = s.delivery_complete;
  task->AddSlices(static_cast<uint32_t>(out.size()));
  (*rails_)[s.rail]->Enqueue(out.data(), out.size(), /*post_now=*/false);
  return Status::OK();
}

void Poster::CutConnections(Task* task) {
  const std::shared_ptr<Peer>& peer = task->peer();
  if (!peer) return;
  for (const auto& [rail, slot] : peer->ResolvedSlots())
    if (rail < rails_->rails.size())
      (*rails_)[rail]->CutPeer(slot, "a request to it outlived its deadline (KVF_TRANSFER_TIMEOUT_MS), or its caller "
                                     "ended it (ExpireBatch)");
}

std::string Poster::Whereabouts(Task* task) {
  const std::shared_ptr<Peer>& peer = task->peer();
  if (!peer) return {};
  std::string out;
  for (const auto& [rail, slot] : peer->ResolvedSlots()) {
    if (rail >= rails_->rails.size()) continue;
    const fabric::Rail::Whereabouts w = (*rails_)[rail]->WhereaboutsOf(task, slot);
    if (w.queued == 0 && w.posted == 0) continue;
    out += text::Format("{}{}: {} slice(s) posted, {} waiting to be posted", out.empty() ? "" : "; ",
                        (*rails_)[rail]->label(), w.posted, w.queued);
    if (w.refused_ms > 0) out += text::Format(" (the provider has refused posts to the peer for {} ms)", w.refused_ms);
    if (w.queued > 0)  // why a slice may wait: the rail's queue, its free contexts, its progress
      out += text::Format(", the rail's queue {} slice(s) (counted {}, {} to refused peers), {} context(s) free, "
                          "polled {} ms ago, drained {} ms ago, posted {} ms ago",
                          w.rail_queued, w.queued_count, w.queued_refused, w.free_contexts, w.since_poll_ms,
                          w.since_drain_ms, w.since_post_ms);
  }
  return out;
}

}  // namespace kvfabric::engine
