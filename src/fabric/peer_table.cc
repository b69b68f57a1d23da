#include "fabric/peer_table.h"

#include <signal.h>

#include <cerrno>

#include "common/log.h"

namespace kvfabric::fabric {

bool ProcessExists(int64_t pid) { return !(kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH); }

PeerTable::PeerTable(std::string where, std::function<bool(int64_t pid)> process_exists)
    : where_(std::move(where)), process_exists_(std::move(process_exists)) {}

PeerTable::Peer* PeerTable::Slot(fi_addr_t slot) {
  while (peers_.size() <= slot) peers_.push_back(std::make_unique<Peer>());
  return peers_[slot].get();
}

bool PeerTable::Remove(fi_addr_t slot) {
  Peer* p = At(slot);
  if (p == nullptr || p->refs - p->removals <= 0) return false;
  ++p->removals;
  removals_pending_.store(true);
  return true;
}

bool PeerTable::FindLive(const std::string& address, fi_addr_t* slot) const {
  for (size_t a = 0; a < peers_.size(); ++a)
    if (peers_[a]->refs > 0 && peers_[a]->address == address) {
      *slot = a;
      return true;
    }
  return false;
}

std::vector<PeerTable::Removal> PeerTable::TakeQuietRemovals(const std::vector<bool>& queued) {
  std::vector<Removal> out;
  bool left = false;
  for (size_t a = 0; a < peers_.size(); ++a) {
    Peer* p = peers_[a].get();
    if (p->removals == 0) continue;
    if (p->inflight.load() > 0 || (a < queued.size() && queued[a])) {  // its operations still hold the slot
      left = true;
      continue;
    }
    p->refs -= p->removals;
    p->removals = 0;
    if (p->refs > 0) continue;  // other users keep the slot (and its one insert)
    Removal r;
    r.slot = a;
    r.close_ep = p->ep;  // shm: its own endpoint goes first
    out.push_back(r);
    // A quiet slot: no operation points at this Peer, and a later insert
    // that reuses the slot starts afresh.
    peers_[a] = std::make_unique<Peer>();
  }
  removals_pending_.store(left);
  return out;
}

size_t PeerTable::slots_in_use() const {
  size_t n = 0;
  for (const auto& p : peers_) n += p->refs > 0;
  return n;
}

bool PeerTable::RefusedTooLong(Peer* p, int64_t now, int64_t limit_ns) {
  if (p == nullptr || limit_ns <= 0) return false;
  if (p->inflight.load(std::memory_order_relaxed) > 0) {
    Taken(p);
    return false;
  }
  if (p->refused_since_ns == 0 || now - p->refused_last_ns > kRefusalGapNs) p->refused_since_ns = now;
  p->refused_last_ns = now;
  return now - p->refused_since_ns >= limit_ns;
}

bool PeerTable::Alive(Peer* p, int64_t now) {
  if (p == nullptr || p->pid == 0) return true;
  if (p->dead) return false;
  if (now - p->checked_ns < kCheckPeriodNs) return true;
  p->checked_ns = now;
  if (!process_exists_(p->pid)) {
    p->dead = true;
    dead_found_.store(true);
    KVF_LOG_WARN("{}: peer process {} on this host has exited; failing its operations", where_, p->pid);
  }
  return !p->dead;
}

bool PeerTable::BusyCheckDue(int64_t now) {
  if (now - last_busy_check_ns_ <= kBusyCheckPeriodNs) return false;
  last_busy_check_ns_ = now;
  return true;
}

void PeerTable::CheckBusyPeers(int64_t now) {
  for (auto& p : peers_)
    if (p->inflight.load() > 0) Alive(p.get(), now);
}

size_t PeerTable::TakeDeadPeers(std::vector<fid_ep*>* close) {
  size_t n = 0;
  for (auto& p : peers_) {
    if (!p->dead || p->cleaned) continue;
    if (p->ep != nullptr) close->push_back(p->ep);
    p->ep = nullptr;
    p->cleaned = true;
    ++n;
  }
  return n;
}

std::vector<fid_ep*> PeerTable::TakeEndpoints() {
  std::vector<fid_ep*> out;
  for (auto& p : peers_) {
    if (p->ep != nullptr) out.push_back(p->ep);
    p->ep = nullptr;
  }
  return out;
}

}  // namespace kvfabric::fabric
