#include "store/node/reservations.h"

#include <utility>

namespace kvfabric::store {
namespace {

uint64_t ReservedBytes(const Reservations::Entry& e) {
  uint64_t bytes = 0;
  for (const Reservations::Slot& s : e.slots) bytes += s.reserved ? s.length : 0;
  return e.granted ? bytes : 0;
}

}  // namespace

uint64_t Reservations::Open(std::vector<Slot> slots, TimePoint expires, uint64_t owner, bool granted) {
  if (next_ == 0) ++next_;
  const uint64_t ticket = next_++;
  auto expiry = by_expiry_.emplace(expires, ticket);
  auto it = open_.emplace(ticket, Held{Entry{expires, std::move(slots), owner, granted}, expiry}).first;
  granted_bytes_ += ReservedBytes(it->second.entry);
  return ticket;
}

Reservations::Entry Reservations::Remove(std::unordered_map<uint64_t, Held>::iterator it) {
  by_expiry_.erase(it->second.expiry);
  Entry e = std::move(it->second.entry);
  open_.erase(it);
  granted_bytes_ -= ReservedBytes(e);
  return e;
}

bool Reservations::Take(uint64_t ticket, uint64_t owner, Entry* out) {
  auto it = open_.find(ticket);
  if (it == open_.end() || it->second.entry.owner != owner) return false;
  *out = Remove(it);
  return true;
}

std::vector<Reservations::Entry> Reservations::TakeExpired(TimePoint now) {
  std::vector<Entry> out;
  while (!by_expiry_.empty() && by_expiry_.begin()->first <= now)
    out.push_back(Remove(open_.find(by_expiry_.begin()->second)));
  return out;
}

std::vector<Reservations::Entry> Reservations::TakeOwnedBy(uint64_t owner) {
  std::vector<Entry> out;
  for (auto it = open_.begin(); it != open_.end();) {
    auto next = std::next(it);
    if (it->second.entry.owner == owner) out.push_back(Remove(it));
    it = next;
  }
  return out;
}

}  // namespace kvfabric::store
