#include "store/client/touch_queue.h"

namespace kvfabric::store {

std::vector<std::string> TouchQueue::Add(const std::string& home, const std::vector<std::string_view>& keys,
                                         std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> g(mu_);
  Queued& q = homes_[home];
  for (std::string_view k : keys)
    if (q.keys.size() < kMaxKeys && q.bytes + k.size() <= kMaxBytes && q.keys.emplace(k).second) q.bytes += k.size();
  if (now - q.sent < kEvery) return {};
  q.sent = now;
  std::vector<std::string> batch(q.keys.begin(), q.keys.end());
  q.keys.clear();
  q.bytes = 0;
  return batch;
}

}  // namespace kvfabric::store
