#include "store/client/pin_book.h"

#include <algorithm>

namespace kvfabric::store {

void PinBook::Record(const std::string& key, const std::string& member) {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<Held>& held = pins_[key];
  auto it = std::find_if(held.begin(), held.end(), [&](const Held& h) { return h.member == member; });
  if (it == held.end()) it = held.insert(held.end(), Held{member, 0});
  ++it->count;
}

std::optional<std::string> PinBook::Holder(const std::string& key) const {
  std::lock_guard<std::mutex> g(mu_);
  auto found = pins_.find(key);
  if (found == pins_.end()) return std::nullopt;
  return found->second.front().member;
}

void PinBook::Forget(const std::string& key, const std::string& member) {
  std::lock_guard<std::mutex> g(mu_);
  auto found = pins_.find(key);
  if (found == pins_.end()) return;
  std::vector<Held>& held = found->second;
  auto it = std::find_if(held.begin(), held.end(), [&](const Held& h) { return h.member == member; });
  if (it != held.end() && --it->count == 0) held.erase(it);
  if (held.empty()) pins_.erase(found);
}

uint32_t PinBook::Count(const std::string& key, const std::string& member) const {
  std::lock_guard<std::mutex> g(mu_);
  auto found = pins_.find(key);
  if (found == pins_.end()) return 0;
  for (const Held& h : found->second)
    if (h.member == member) return h.count;
  return 0;
}

}  // namespace kvfabric::store
