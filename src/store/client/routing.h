// Router: where a store client's call sends each key of a batch, grouped
// into one NodeCall per member. It also keeps this process's mappings of
// same-host pools (PoolMaps) in step with the members it meets.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "kvfabric/status.h"
#include "store/client/node_calls.h"
#include "store/members/member_view.h"
#include "store/mover/pool_maps.h"

namespace kvfabric::store {

// Where a call sends a key: its home, the home it had before its home
// entered the store, the member placement ranks `rank` for it (0: its
// home; 1..: the members that hold its other copies), or (kNamed) the
// member (*named)[i] for keys[i], wherever it ranks now.
struct Route {
  enum class Kind : uint8_t { kHome, kPreviousHome, kRanked, kNamed };
  Kind kind = Kind::kHome;
  uint32_t rank = 0;
  const std::vector<std::string>* named = nullptr;
  static constexpr Route Home() { return {}; }
  static constexpr Route PreviousHome() { return {Kind::kPreviousHome, 0, nullptr}; }
  static constexpr Route Ranked(uint32_t rank) { return {Kind::kRanked, rank, nullptr}; }
  static constexpr Route Named(const std::vector<std::string>* named) { return {Kind::kNamed, 0, named}; }
  bool operator==(const Route&) const = default;
};

// The miss of a key its home holds no page of, and whether `s` is one
// (not a miss for a checksum or a late lookup: that page was there).
Status Absent(const std::string& key);
bool IsAbsent(const Status& s);

class Router {
 public:
  Router(MemberView* members, PoolMaps* maps) : members_(members), maps_(maps) {}

  // The keys `which` whose results are OK, grouped by the member `route`
  // names for each (in the current snapshot). A key with no such member
  // gets Unavailable (no member with a pool, too few for its copy, a named
  // member gone) or, for kPreviousHome when the members changed since its
  // home was asked, Absent; it is left out. Maps the pools of same-host
  // members met.
  std::vector<NodeCall> Group(const std::vector<std::string>& keys, const std::vector<size_t>& which,
                              std::vector<Status>* results, Route route = Route::Home()) const;
  // The same for every key of the batch.
  std::vector<NodeCall> Group(const std::vector<std::string>& keys, std::vector<Status>* results,
                              Route route = Route::Home()) const;
  // Takes the call to `member` (none when null) out of `calls`; the keys it had.
  static std::vector<size_t> TakeCallTo(std::vector<NodeCall>* calls, const std::string* member);

 private:
  // The member index `route` names for key i, starting from its home; the
  // snapshot's size when there is none (results[i] then says why).
  size_t MemberFor(const MemberSnapshot& snap, const std::vector<std::string>& keys, size_t i, Route route,
                   std::vector<Status>* results) const;

  MemberView* const members_;
  PoolMaps* const maps_;
  mutable std::atomic<const MemberSnapshot*> maps_for_{nullptr};  // the snapshot maps_ was last kept for
};

}  // namespace kvfabric::store
