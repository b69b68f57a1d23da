// Tombstones: the keys removed on this node lately. A hand-over's PUT (if
// absent) of such a key is refused, so that an older copy on the key's
// previous home never comes back after a client removed the key: a client
// removes on the home first and then on the previous home, and a hand-over
// that copied the page out before that second remove would otherwise land
// on the home after both (handoff.h). A refused hand-over keeps its page
// where it is, as any refusal does.
//
// A key is remembered for `window` (the hand-over window,
// KVF_STORE_HANDOFF_MS) after its last removal, and at most `max` keys are
// (the oldest go first: memory stays bounded under any rate of removals).
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace kvfabric::store {

class Tombstones {
 public:
  using Clock = std::chrono::steady_clock;

  Tombstones(std::chrono::milliseconds window, size_t max);

  // `key` was removed at `now` (times never go back between calls).
  void Add(std::string_view key, Clock::time_point now);
  // Whether `key` was removed within the window before `now`.
  bool Has(std::string_view key, Clock::time_point now) const;
  size_t size() const { return last_.size(); }

 private:
  void Expire(Clock::time_point now);
  void PopOldest();  // order_'s first removal, and its key unless removed again since

  const std::chrono::milliseconds window_;
  const size_t max_;
  std::unordered_map<std::string, Clock::time_point> last_;    // key -> its last removal
  std::deque<std::pair<std::string, Clock::time_point>> order_;  // removals, oldest first
};

}  // namespace kvfabric::store
