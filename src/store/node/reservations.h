// Reservations: a node's PUTs by WRITE between their two steps (kReserve,
// then kCommit): the slots reserved for a writer, under a ticket, until the
// writer commits them or their time is up. A pure data structure: the
// caller locks, owns the slots (PageTable) and passes the time in.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvfabric::store {

class Reservations {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Slot {
    std::string key;  // empty in a granted reservation: the commit names the page
    uint64_t offset = 0;  // in the pool (meaningful when reserved)
    uint64_t length = 0;
    bool reserved = false;  // false: the item was refused, nothing to commit
  };
  struct Entry {
    TimePoint expires;
    std::vector<Slot> slots;  // in the order of the request's items
    uint64_t owner = 0;       // the control connection that reserved them: only it commits them
    bool granted = false;     // slots handed out ahead of a PUT, keys unknown yet
  };

  // Tickets start at `first_ticket` (a random number per node life, so a
  // commit meant for an earlier life of the node matches nothing) and are
  // never 0.
  explicit Reservations(uint64_t first_ticket) : next_(first_ticket) {}

  // Keeps `slots` for `owner` until `expires`; their ticket.
  uint64_t Open(std::vector<Slot> slots, TimePoint expires, uint64_t owner, bool granted = false);
  // Takes the entry of `ticket` (true) when `owner` opened it; else false
  // and nothing changes: no such ticket (never opened, taken already, or
  // expired and taken by TakeExpired), or another owner's, which stays.
  bool Take(uint64_t ticket, uint64_t owner, Entry* out);
  // Takes every entry whose `expires` is not after `now`, soonest first.
  std::vector<Entry> TakeExpired(TimePoint now);
  // Takes every entry of `owner` (its connection closed).
  std::vector<Entry> TakeOwnedBy(uint64_t owner);
  size_t size() const { return open_.size(); }
  // The bytes of the reserved slots of the granted entries open now.
  uint64_t granted_bytes() const { return granted_bytes_; }

 private:
  struct Held {
    Entry entry;
    std::multimap<TimePoint, uint64_t>::iterator expiry;
  };
  // Takes the entry `it` names out of every index.
  Entry Remove(std::unordered_map<uint64_t, Held>::iterator it);

  uint64_t next_;
  uint64_t granted_bytes_ = 0;
  std::unordered_map<uint64_t, Held> open_;
  std::multimap<TimePoint, uint64_t> by_expiry_;  // expires -> ticket
};

}  // namespace kvfabric::store
