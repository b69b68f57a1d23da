#include "store/node/tombstones.h"

namespace kvfabric::store {

Tombstones::Tombstones(std::chrono::milliseconds window, size_t max) : window_(window), max_(max) {}

void Tombstones::Add(std::string_view key, Clock::time_point now) {
  Expire(now);
  last_[std::string(key)] = now;
  order_.emplace_back(std::string(key), now);
  while (last_.size() > max_ || order_.size() > 2 * max_) PopOldest();
}

bool Tombstones::Has(std::string_view key, Clock::time_point now) const {
  auto it = last_.find(std::string(key));
  return it != last_.end() && now - it->second < window_;
}

void Tombstones::Expire(Clock::time_point now) {
  while (!order_.empty() && now - order_.front().second >= window_) PopOldest();
}

void Tombstones::PopOldest() {
  // The oldest removal goes; its key stays only if removed again since.
  const auto& [oldest, when] = order_.front();
  auto it = last_.find(oldest);
  if (it != last_.end() && it->second == when) last_.erase(it);
  order_.pop_front();
}

}  // namespace kvfabric::store
