#include "store/reservations.h"

#include <utility>

namespace kvfabric::store {

uint64_t Reservations::Open(std::vector<Slot> slots, TimePoint expires, bool granted) {
  if (next_ == 0) ++next_;
  const uint64_t ticket = next_++;
  auto expiry = by_expiry_.emplace(expires, ticket);
  open_.emplace(ticket, Held{Entry{expires, std::move(slots), granted}, expiry});
  return ticket;
}

bool Reservations::Take(uint64_t ticket, Entry* out) {
  auto it = open_.find(ticket);
  if (it == open_.end()) return false;
  by_expiry_.erase(it->second.expiry);
  *out = std::move(it->second.entry);
  open_.erase(it);
  return true;
}

std::vector<Reservations::Entry> Reservations::TakeExpired(TimePoint now) {
  std::vector<Entry> out;
  while (!by_expiry_.empty() && by_expiry_.begin()->first <= now) {
    auto it = open_.find(by_expiry_.begin()->second);
    by_expiry_.erase(by_expiry_.begin());
    out.push_back(std::move(it->second.entry));
    open_.erase(it);
  }
  return out;
}

}  // namespace kvfabric::store
